//! One malformed or forbidden input at a time into a sans-IO [`Connection`]: each
//! asserts the exact Terminate bytes sent back (RFC 5040 §4.8 layer / type / code)
//! and that the connection ends.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use iwarp::handshake::Negotiated;
use iwarp::wire::ddp::{DdpHeader, Opcode, ReadRequest, SegmentHeader};
use iwarp::wire::mpa;
use iwarp::{Connection, Limits, TxBatch};
use rdma::{
    Access, DisconnectReason, LocalSge, PeerParams, ProtectionDomain, QpEvent, RecvWr, WcStatus,
};

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
    (
        Connection::new(
            pd.clone(),
            &neg,
            Limits::default(),
            Instant::now(),
            Duration::ZERO,
        ),
        pd.into(),
    )
}

fn untagged(op: Opcode, qn: u32, msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    SegmentHeader {
        last,
        opcode: op,
        ddp: DdpHeader::Untagged {
            rsvd_ulp: 0,
            qn,
            msn,
            mo,
        },
    }
    .emit(&mut u);
    u.extend_from_slice(payload);
    u
}

/// Feeds one ULPDU as an FPDU; returns the bytes the connection sends back.
fn feed(c: &mut Connection, ulpdu: &[u8], crc: bool) -> Vec<u8> {
    let mut f = Vec::new();
    mpa::encode_fpdu(ulpdu, crc, &mut f);
    feed_raw(c, &f)
}

fn feed_raw(c: &mut Connection, bytes: &[u8]) -> Vec<u8> {
    let mut buf = BytesMut::from(bytes);
    c.handle_input(&mut buf);
    let mut batch = TxBatch::new();
    while c.poll_transmit(Instant::now(), &mut batch, 1 << 20) {}
    batch.to_vec()
}

/// The Terminate FPDU we expect: untagged queue 2, MSN 1, last, control word.
fn terminate(layer: u8, etype: u8, code: u8, crc: bool) -> Vec<u8> {
    let mut u = untagged(Opcode::TERMINATE, 2, 1, 0, true, &[]);
    u.extend_from_slice(&[(layer << 4) | etype, code, 0, 0]);
    let mut f = Vec::new();
    mpa::encode_fpdu(&u, crc, &mut f);
    f
}

fn assert_terminated(c: &mut Connection, layer: u8, etype: u8, code: u8) {
    assert!(!c.is_open());
    assert!(c.is_finished());
    assert_eq!(
        c.poll_event(),
        Some(QpEvent::Disconnected(DisconnectReason::LocalError {
            layer,
            etype,
            code
        }))
    );
}

#[test]
fn rfc5041_send_without_posted_receive_is_invalid_msn_no_buffer() {
    let (mut c, _) = conn(false);
    let out = feed(&mut c, &untagged(Opcode::SEND, 0, 1, 0, true, b"hi"), false);
    assert_eq!(out, terminate(1, 2, 2, false));
    // The exact wire bytes: len 22, 0x41 0x47, rsvd, qn 2, msn 1, mo 0, 0x12 0x02.
    assert_eq!(
        out,
        [
            0, 22, 0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x12, 0x02, 0, 0, 0,
            0, 0, 0
        ]
    );
    assert_terminated(&mut c, 1, 2, 2);
}

#[test]
fn rfc5041_unsupported_ddp_version_untagged() {
    let (mut c, _) = conn(true);
    let mut u = untagged(Opcode::SEND, 0, 1, 0, true, b"");
    u[0] = (u[0] & !3) | 2;
    assert_eq!(feed(&mut c, &u, true), terminate(1, 2, 6, true));
    assert_terminated(&mut c, 1, 2, 6);
}

#[test]
fn rfc5040_unsupported_rdmap_version() {
    let (mut c, _) = conn(false);
    let mut u = untagged(Opcode::SEND, 0, 1, 0, true, b"");
    u[1] = 0x83;
    assert_eq!(feed(&mut c, &u, false), terminate(0, 2, 5, false));
}

#[test]
fn rfc5044_crc_mismatch_is_an_llp_error() {
    let (mut c, _) = conn(true);
    let mut f = Vec::new();
    mpa::encode_fpdu(&untagged(Opcode::SEND, 0, 1, 0, true, b"x"), true, &mut f);
    let n = f.len();
    f[n - 2] ^= 0xff;
    assert_eq!(feed_raw(&mut c, &f), terminate(2, 0, 2, true));
    assert_terminated(&mut c, 2, 0, 2);
}

#[test]
fn rfc5041_invalid_queue_number() {
    let (mut c, _) = conn(false);
    assert_eq!(
        feed(&mut c, &untagged(Opcode::SEND, 5, 1, 0, true, b""), false),
        terminate(1, 2, 1, false)
    );
}

#[test]
fn rfc5040_opcode_on_the_wrong_queue_or_model_is_unexpected() {
    let (mut c, _) = conn(false);
    assert_eq!(
        feed(&mut c, &untagged(Opcode::SEND, 1, 1, 0, true, b""), false),
        terminate(0, 2, 6, false)
    );
    let (mut c, _) = conn(false);
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::SEND,
        ddp: DdpHeader::Tagged { stag: 1, to: 0 },
    }
    .emit(&mut u);
    assert_eq!(feed(&mut c, &u, false), terminate(0, 2, 6, false));
    let (mut c, _) = conn(false);
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::READ_RESPONSE,
        ddp: DdpHeader::Tagged { stag: 1, to: 0 },
    }
    .emit(&mut u);
    assert_eq!(
        feed(&mut c, &u, false),
        terminate(0, 2, 6, false),
        "no Read outstanding"
    );
}

#[test]
fn rfc5041_msn_out_of_range_and_bad_message_offset() {
    let (mut c, pd) = conn(false);
    let mr = pd.register_zeroed(100, Access::LOCAL_WRITE).unwrap();
    c.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![LocalSge {
            mr,
            offset: 0,
            len: 100,
        }],
    })
    .unwrap();
    assert_eq!(
        feed(&mut c, &untagged(Opcode::SEND, 0, 2, 0, true, b""), false),
        terminate(1, 2, 3, false)
    );
    let (mut c, pd) = conn(false);
    let mr = pd.register_zeroed(100, Access::LOCAL_WRITE).unwrap();
    c.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![LocalSge {
            mr,
            offset: 0,
            len: 100,
        }],
    })
    .unwrap();
    assert!(feed(
        &mut c,
        &untagged(Opcode::SEND, 0, 1, 0, false, b"abcd"),
        false
    )
    .is_empty());
    assert_eq!(
        feed(
            &mut c,
            &untagged(Opcode::SEND, 0, 1, 7, true, b"efgh"),
            false
        ),
        terminate(1, 2, 4, false)
    );
    assert_eq!(
        c.poll_completion().map(|c| c.status),
        Some(WcStatus::Flushed)
    );
}

#[test]
fn rfc5040_read_requests_beyond_ird_overflow_queue_1() {
    let (mut c, pd) = conn(false);
    let src = pd.register_zeroed(100, Access::REMOTE_READ).unwrap();
    let rr = |msn| {
        let mut body = Vec::new();
        ReadRequest {
            sink_stag: 9,
            sink_to: 0,
            size: 10,
            src_stag: src.stag().0,
            src_to: 0,
        }
        .emit(&mut body);
        untagged(Opcode::READ_REQUEST, 1, msn, 0, true, &body)
    };
    // IRD is 1: the first is served (one Read Response), the second is one too many.
    let mut two = Vec::new();
    mpa::encode_fpdu(&rr(1), false, &mut two);
    mpa::encode_fpdu(&rr(2), false, &mut two);
    let out = feed_raw(&mut c, &two);
    assert!(out.ends_with(&terminate(1, 2, 2, false)), "{out:02x?}");
    assert_terminated(&mut c, 1, 2, 2);
}

#[test]
fn received_terminate_is_a_connection_error_and_flushes() {
    let (mut c, pd) = conn(false);
    let mr = pd.register_zeroed(100, Access::LOCAL_WRITE).unwrap();
    c.post_recv(RecvWr {
        wr_id: 4,
        sgl: vec![LocalSge {
            mr,
            offset: 0,
            len: 100,
        }],
    })
    .unwrap();
    let mut u = untagged(Opcode::TERMINATE, 2, 1, 0, true, &[]);
    u.extend_from_slice(&[0x11, 0x00, 0, 0]);
    assert!(
        feed(&mut c, &u, false).is_empty(),
        "no Terminate answers a Terminate"
    );
    assert_eq!(
        c.poll_event(),
        Some(QpEvent::Disconnected(DisconnectReason::RemoteError {
            layer: 1,
            etype: 1,
            code: 0
        }))
    );
    let wc = c.poll_completion().unwrap();
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Flushed));
}

#[test]
fn tagged_write_checks_stag_bounds_and_rights() {
    let write = |stag: u32, to: u64, data: &[u8]| {
        let mut u = Vec::new();
        SegmentHeader {
            last: true,
            opcode: Opcode::RDMA_WRITE,
            ddp: DdpHeader::Tagged { stag, to },
        }
        .emit(&mut u);
        u.extend_from_slice(data);
        u
    };
    let (mut c, pd) = conn(false);
    let mr = pd
        .register_zeroed(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    assert!(feed(&mut c, &write(mr.stag().0, 4, b"abcd"), false).is_empty());
    assert_eq!(mr.read(4, 4).unwrap(), &b"abcd"[..]);
    assert_eq!(
        feed(&mut c, &write(mr.stag().0, 5, b"abcd"), false),
        terminate(1, 1, 1, false)
    );
    let (mut c, pd) = conn(false);
    let ro = pd.register_zeroed(8, Access::REMOTE_READ).unwrap();
    assert_eq!(
        feed(&mut c, &write(ro.stag().0, 0, b"a"), false),
        terminate(0, 1, 2, false)
    );
    let (mut c, _pd) = conn(false);
    assert_eq!(
        feed(&mut c, &write(0x1234_5678, 0, b"a"), false),
        terminate(1, 1, 0, false)
    );
}

#[test]
fn direct_placement_reads_payload_into_the_region_and_skips_the_trailer() {
    let (mut c, pd) = conn(false);
    let mr = pd
        .register_zeroed(100_000, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let payload: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::RDMA_WRITE,
        ddp: DdpHeader::Tagged {
            stag: mr.stag().0,
            to: 1000,
        },
    }
    .emit(&mut u);
    u.extend_from_slice(&payload);
    let mut f = Vec::new();
    mpa::encode_fpdu(&u, false, &mut f);
    // A second FPDU behind it, placed normally.
    let mut u2 = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::RDMA_WRITE,
        ddp: DdpHeader::Tagged {
            stag: mr.stag().0,
            to: 0,
        },
    }
    .emit(&mut u2);
    u2.extend_from_slice(b"tail");
    mpa::encode_fpdu(&u2, false, &mut f);

    // Header plus 100 payload bytes arrive first.
    let mut buf = BytesMut::from(&f[..2 + 14 + 100]);
    c.handle_input(&mut buf);
    let d = c.poll_direct(&mut buf).expect("direct placement offered");
    assert!(buf.is_empty(), "header and early payload consumed");
    assert_eq!((d.offset, d.len), (1100, 40_000 - 100));
    // The "driver" reads the rest straight into the region.
    let rest = &f[2 + 14 + 100..2 + 14 + 40_000];
    d.region
        .with_range_mut(d.offset, d.len, |dst| dst.copy_from_slice(rest))
        .unwrap();
    c.direct_done();
    // What the driver may read next without running past the next header: the
    // trailer (no pad here, 4 CRC bytes), then the rest of a partial FPDU.
    assert_eq!(c.missing_fpdu_bytes(&[]), 4);
    let second = 2 + 14 + 4 + 4;
    let mut buf = BytesMut::from(&f[2 + 14 + 40_000..2 + 14 + 40_000 + 4 + 1]);
    c.handle_input(&mut buf);
    assert_eq!(c.missing_fpdu_bytes(&buf), 0, "length field incomplete");
    buf.extend_from_slice(&f[2 + 14 + 40_000 + 5..2 + 14 + 40_000 + 4 + 10]);
    c.handle_input(&mut buf);
    assert_eq!(c.missing_fpdu_bytes(&buf), second - 10);
    buf.extend_from_slice(&f[2 + 14 + 40_000 + 4 + 10..]);
    c.handle_input(&mut buf);
    assert!(c.is_open());
    assert!(buf.is_empty());
    assert_eq!(mr.read(1000, 40_000).unwrap(), &payload[..]);
    assert_eq!(mr.read(0, 4).unwrap(), &b"tail"[..]);
}

#[test]
fn direct_placement_is_not_offered_for_a_bad_stag_and_the_normal_path_terminates() {
    let (mut c, _pd) = conn(false);
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::RDMA_WRITE,
        ddp: DdpHeader::Tagged {
            stag: 0x0bad_0001,
            to: 0,
        },
    }
    .emit(&mut u);
    u.extend_from_slice(&vec![7u8; 30_000]);
    let mut f = Vec::new();
    mpa::encode_fpdu(&u, false, &mut f);
    let mut buf = BytesMut::from(&f[..64]);
    c.handle_input(&mut buf);
    assert!(c.poll_direct(&mut buf).is_none());
    assert_eq!(buf.len(), 64, "nothing consumed");
    assert!(c.is_open());
    // The complete FPDU then gets the normal path's answer.
    assert_eq!(feed_raw(&mut c, &f[..]), terminate(1, 1, 0, false));
}

#[test]
fn rfc5040_send_with_invalidate_of_an_unknown_stag_cannot_be_invalidated() {
    let (mut c, pd) = conn(false);
    let mr = pd.register_zeroed(100, Access::LOCAL_WRITE).unwrap();
    c.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![LocalSge {
            mr,
            offset: 0,
            len: 100,
        }],
    })
    .unwrap();
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::SEND_INVALIDATE,
        ddp: DdpHeader::Untagged {
            rsvd_ulp: 0x0bad_0001,
            qn: 0,
            msn: 1,
            mo: 0,
        },
    }
    .emit(&mut u);
    u.extend_from_slice(b"reply");
    assert_eq!(feed(&mut c, &u, false), terminate(0, 2, 9, false));
    let wc = c.poll_completion().unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemoteOperationError));
    assert_terminated(&mut c, 0, 2, 9);
}

#[test]
fn send_with_invalidate_invalidates_and_reports_the_stag() {
    let (mut c, pd) = conn(false);
    let rx = pd.register_zeroed(100, Access::LOCAL_WRITE).unwrap();
    let target = pd
        .register_zeroed(100, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    c.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![LocalSge {
            mr: rx,
            offset: 0,
            len: 100,
        }],
    })
    .unwrap();
    let mut u = Vec::new();
    SegmentHeader {
        last: true,
        opcode: Opcode::SEND_SE_INVALIDATE,
        ddp: DdpHeader::Untagged {
            rsvd_ulp: target.stag().0,
            qn: 0,
            msn: 1,
            mo: 0,
        },
    }
    .emit(&mut u);
    assert!(feed(&mut c, &u, false).is_empty());
    let wc = c.poll_completion().unwrap();
    assert_eq!(wc.invalidated, Some(target.stag()));
    assert!(wc.solicited);
    assert!(!target.is_valid());
    assert!(c.is_open());
}
