//! Property tests: codec round trips, and a sans-IO connection pair exchanging random
//! messages over a byte pipe cut at random points (no sockets, virtual time).

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use iwarp::handshake::{Initiator, Responder};
use iwarp::wire::ddp::{DdpHeader, Opcode, ReadRequest, SegmentHeader, TerminateControl};
use iwarp::wire::mpa::{self, FrameKind, IrdOrd, MpaFrame};
use iwarp::{Connection, Limits, TxBatch};
use proptest::prelude::*;
use rdma::{
    Access, ConnectParams, LocalSge, ProtectionDomain, RecvWr, RemoteAddr, SendOp, SendWr,
    WcOpcode, WcStatus,
};

fn header() -> impl Strategy<Value = SegmentHeader> {
    let tagged = (any::<u32>(), any::<u64>()).prop_map(|(stag, to)| DdpHeader::Tagged { stag, to });
    let untagged = (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(rsvd_ulp, qn, msn, mo)| DdpHeader::Untagged {
            rsvd_ulp,
            qn,
            msn,
            mo,
        },
    );
    (any::<bool>(), 0u8..16, prop_oneof![tagged, untagged]).prop_map(|(last, op, ddp)| {
        SegmentHeader {
            last,
            opcode: Opcode(op),
            ddp,
        }
    })
}

proptest! {
    #[test]
    fn segment_header_roundtrip(h in header(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = Vec::new();
        h.emit(&mut b);
        prop_assert_eq!(b.len(), h.buffer_len());
        b.extend_from_slice(&payload);
        let (p, n) = SegmentHeader::parse(&b).unwrap();
        prop_assert_eq!(p, h);
        prop_assert_eq!(&b[n..], &payload[..]);
    }

    #[test]
    fn read_request_roundtrip(a in any::<u32>(), b in any::<u64>(), c in any::<u32>(), d in any::<u32>(), e in any::<u64>()) {
        let r = ReadRequest { sink_stag: a, sink_to: b, size: c, src_stag: d, src_to: e };
        let mut v = Vec::new();
        r.emit(&mut v);
        prop_assert_eq!(ReadRequest::parse(&v).unwrap(), r);
    }

    #[test]
    fn terminate_roundtrip(layer in 0u8..16, etype in 0u8..16, code in any::<u8>(), m in any::<bool>(), d in any::<bool>(), r in any::<bool>()) {
        let t = TerminateControl { layer, etype, code, hdr_m: m, hdr_d: d, hdr_r: r };
        let mut v = Vec::new();
        t.emit(&mut v);
        prop_assert_eq!(TerminateControl::parse(&v).unwrap(), t);
    }

    #[test]
    fn mpa_frame_roundtrip(req in any::<bool>(), flags in 0u8..16, rev in any::<u8>(), pd in proptest::collection::vec(any::<u8>(), 0..=512)) {
        let f = MpaFrame {
            kind: if req { FrameKind::Request } else { FrameKind::Reply },
            flags: flags << 4,
            revision: rev,
            private_data: pd.into(),
        };
        let mut v = Vec::new();
        f.emit(&mut v);
        prop_assert_eq!(v.len(), f.buffer_len());
        let (p, n) = MpaFrame::parse(&v).unwrap().unwrap();
        prop_assert_eq!(n, v.len());
        prop_assert_eq!(p, f);
        // Every strict prefix asks for more bytes.
        for cut in [0, 1, 19, v.len() - 1] {
            if cut < v.len() {
                prop_assert_eq!(MpaFrame::parse(&v[..cut]).unwrap(), None);
            }
        }
    }

    #[test]
    fn ird_ord_roundtrip(ird in 0u16..0x4000, ord in 0u16..0x4000, a in any::<bool>(), b in any::<bool>(), c in any::<bool>(), d in any::<bool>()) {
        let io = IrdOrd { ird, ord, peer_to_peer: a, zero_length_rtr: b, rtr_write: c, rtr_read: d };
        let mut v = Vec::new();
        io.emit(&mut v);
        prop_assert_eq!(IrdOrd::parse(&v).unwrap(), io);
    }

    #[test]
    fn fpdus_survive_arbitrary_stream_cuts(
        ulpdus in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8),
        crc in any::<bool>(),
        cut in 1usize..50,
    ) {
        let mut stream = Vec::new();
        for u in &ulpdus {
            mpa::encode_fpdu(u, crc, &mut stream);
        }
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in stream.chunks(cut) {
            buf.extend_from_slice(chunk);
            while let Some(f) = mpa::take_fpdu(&mut buf, crc).unwrap() {
                out.push(f.ulpdu.to_vec());
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(out, ulpdus);
    }
}

/// Two sans-IO connections joined by in-memory pipes.
struct Pair {
    a: Connection,
    b: Connection,
    a_in: BytesMut,
    b_in: BytesMut,
    now: Instant,
}

impl Pair {
    fn new(crc: bool, max_ulpdu: usize) -> (Pair, ProtectionDomain, ProtectionDomain) {
        let mut req = Vec::new();
        let ini = Initiator::new(
            ConnectParams {
                ird: 4,
                ord: 4,
                ..Default::default()
            },
            crc,
            &mut req,
        )
        .unwrap();
        let inc = Responder::handle_request(&mut BytesMut::from(&req[..]))
            .unwrap()
            .unwrap();
        let mut rep = Vec::new();
        let nb = inc
            .accept(
                &ConnectParams {
                    ird: 4,
                    ord: 4,
                    ..Default::default()
                },
                false,
                &mut rep,
            )
            .unwrap();
        let na = ini
            .handle_reply(&mut BytesMut::from(&rep[..]))
            .unwrap()
            .unwrap();
        let (pa, pb) = (
            rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE),
            rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE),
        );
        let limits = Limits {
            max_ulpdu,
            ..Limits::default()
        };
        let now = Instant::now();
        let pair = Pair {
            a: Connection::new(pa.clone(), &na, limits, now, Duration::from_millis(50)),
            b: Connection::new(pb.clone(), &nb, limits, now, Duration::ZERO),
            a_in: BytesMut::new(),
            b_in: BytesMut::new(),
            now,
        };
        (pair, pa.into(), pb.into())
    }

    /// Moves bytes both ways in pieces of `cut` bytes until quiet.
    fn run(&mut self, cut: usize) {
        for _ in 0..100_000 {
            let mut moved = false;
            for (from_a, _) in [(true, 0), (false, 0)] {
                let (src, dst, inbuf) = if from_a {
                    (&mut self.a, &mut self.b, &mut self.b_in)
                } else {
                    (&mut self.b, &mut self.a, &mut self.a_in)
                };
                let mut batch = TxBatch::new();
                if src.poll_transmit(self.now, &mut batch, 1 << 20) {
                    moved = true;
                    for chunk in batch.to_vec().chunks(cut) {
                        inbuf.extend_from_slice(chunk);
                        dst.handle_input(inbuf);
                    }
                }
            }
            if !moved {
                if let Some(t) = self.a.poll_timeout() {
                    self.now = t; // virtual clock: jump to the hold deadline
                    continue;
                }
                return;
            }
        }
        panic!("pair did not settle");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn random_sends_writes_and_reads_arrive_intact(
        msgs in proptest::collection::vec((0u8..3, 0usize..5000, 0usize..100), 1..12),
        crc in any::<bool>(),
        cut in 1usize..3000,
        max_ulpdu in 40usize..3000,
    ) {
        let (mut p, pa, pb) = Pair::new(crc, max_ulpdu);
        let target = pb.register_zeroed(10_200, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        target.with_mut(|m| for (i, x) in m.iter_mut().enumerate() { *x = (i * 7) as u8 }).unwrap();
        let sink = pa.register_zeroed(10_000, Access::LOCAL_WRITE).unwrap();
        let rx = pb.register_zeroed(5000 * 12, Access::LOCAL_WRITE).unwrap();
        for i in 0..msgs.len() {
            p.b.post_recv(RecvWr { wr_id: i as u64, sgl: vec![LocalSge { mr: rx.clone(), offset: i * 5000, len: 5000 }] }).unwrap();
        }
        let mut sent = Vec::new();
        for (i, &(kind, len, off)) in msgs.iter().enumerate() {
            let data: Bytes = (0..len).map(|j| (j as u8) ^ (i as u8)).collect::<Vec<_>>().into();
            let op = match kind {
                0 => SendOp::Send,
                1 => SendOp::RdmaWrite(RemoteAddr { stag: target.stag(), offset: off as u64 }),
                // Reads use the upper half, which Writes never touch: RDMAP does not
                // order a Read Response against Writes posted after the Read (RFC
                // 5040 §5.5; verbs needs a fence for that).
                _ => SendOp::RdmaRead {
                    remote: RemoteAddr { stag: target.stag(), offset: (5100 + off) as u64 },
                    sink: LocalSge { mr: sink.clone(), offset: off, len },
                },
            };
            p.a.post_send(SendWr { wr_id: i as u64, op, sgl: vec![pa.sge(data.clone()).unwrap()] }).unwrap();
            sent.push((kind, off, data));
        }
        p.run(cut);
        // Every send-queue entry completes, in order, successfully.
        for i in 0..msgs.len() {
            let c = p.a.poll_completion().expect("completion");
            prop_assert_eq!(c.wr_id, i as u64);
            prop_assert_eq!(c.status, WcStatus::Success);
        }
        let mut expect_target: Vec<u8> = (0..10_200).map(|i| (i * 7) as u8).collect();
        let mut recv_i = 0;
        for (kind, off, data) in &sent {
            match kind {
                0 => {
                    let c = p.b.poll_completion().expect("recv");
                    prop_assert_eq!(c.opcode, WcOpcode::Recv);
                    prop_assert_eq!(c.byte_len, data.len());
                    prop_assert_eq!(rx.read(recv_i * 5000, data.len()).unwrap(), data.clone());
                    recv_i += 1;
                }
                1 => expect_target[*off..off + data.len()].copy_from_slice(data),
                _ => {
                    let got = sink.read(*off, data.len()).unwrap();
                    let src = 5100 + off;
                    prop_assert_eq!(&got[..], &expect_target[src..src + data.len()]);
                }
            }
        }
        prop_assert!(target.with(|m| m == &expect_target[..]));
        prop_assert!(p.a.is_open() && p.b.is_open());
    }
}
