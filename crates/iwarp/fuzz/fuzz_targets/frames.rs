//! Fuzzes every parser reachable from the wire: MPA Request/Reply, the responder and
//! initiator handshakes, FPDU framing with and without CRC, DDP/RDMAP headers, Read
//! Request and Terminate bodies, and the whole receive path of a connection (placement
//! into registered regions, MSN/MO checks, Terminate generation).
#![no_main]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use iwarp::handshake::{Initiator, Negotiated, Responder};
use iwarp::wire::ddp::{ReadRequest, SegmentHeader, TerminateControl};
use iwarp::wire::mpa::{self, MpaFrame};
use iwarp::{Connection, Limits, TxBatch};
use libfuzzer_sys::fuzz_target;
use rdma::{Access, ConnectParams, LocalSge, PeerParams, RecvWr};

fuzz_target!(|data: &[u8]| {
    let _ = MpaFrame::parse(data);
    let _ = Responder::handle_request(&mut BytesMut::from(data));
    let mut req = Vec::new();
    if let Ok(ini) = Initiator::new(ConnectParams::default(), false, &mut req) {
        let _ = ini.handle_reply(&mut BytesMut::from(data));
    }
    let _ = SegmentHeader::parse(data);
    let _ = ReadRequest::parse(data);
    let _ = TerminateControl::parse(data);

    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let crc = sel & 1 != 0;
    let mut buf = BytesMut::from(rest);
    while let Ok(Some(f)) = mpa::take_fpdu(&mut buf, crc) {
        let _ = SegmentHeader::parse(&f.ulpdu);
    }

    // The receive path of a live connection, fed in chunks chosen by the input.
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let rw = pd.register_zeroed(
        4096,
        Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
    ).unwrap();
    let neg = Negotiated {
        active: sel & 2 != 0,
        crc,
        ird: 4,
        ord: 4,
        peer_revision: 2,
        peer: PeerParams::default(),
    };
    // The region's STag has random key bits; the token "STAG" in the input stands for
    // it, so the fuzzer can reach placement (seeds carry it in tagged headers).
    let stag = rw.stag().0.to_be_bytes();
    let mut rest = rest.to_vec();
    let mut i = 0;
    while i + 4 <= rest.len() {
        if &rest[i..i + 4] == b"STAG" {
            rest[i..i + 4].copy_from_slice(&stag);
            i += 4;
        } else {
            i += 1;
        }
    }
    let now = Instant::now();
    let mut c = Connection::new(
        pd,
        &neg,
        Limits {
            max_ulpdu: 1024,
            max_send_wr: 16,
            max_recv_wr: 16,
            direct_placement_min: 8,
        },
        now,
        Duration::ZERO,
    );
    for i in 0..(sel >> 4) {
        let _ = c.post_recv(RecvWr {
            wr_id: i as u64,
            sgl: vec![LocalSge {
                mr: rw.clone(),
                offset: 0,
                len: 1000,
            }],
        });
    }
    let step = 1 + ((sel >> 2) & 3) as usize * 7;
    let mut input = BytesMut::new();
    let mut pos = 0;
    while pos < rest.len() {
        let end = (pos + step).min(rest.len());
        input.extend_from_slice(&rest[pos..end]);
        pos = end;
        c.handle_input(&mut input);
        // Direct placement as the driver does it: the next bytes of the stream go
        // straight into the region.
        if let Some(d) = c.poll_direct(&mut input) {
            let take = d.len.min(rest.len() - pos);
            let src = &rest[pos..pos + take];
            let _ = d
                .region
                .with_range_mut(d.offset, take, |dst| dst.copy_from_slice(src));
            pos += take;
            if take < d.len {
                break; // stream ended mid-payload
            }
            c.direct_done();
        }
        let mut batch = TxBatch::new();
        while c.poll_transmit(now, &mut batch, 1 << 16) {
            batch.clear();
        }
        while c.poll_completion().is_some() {}
    }
    c.handle_eof();
    while c.poll_completion().is_some() {}
});
