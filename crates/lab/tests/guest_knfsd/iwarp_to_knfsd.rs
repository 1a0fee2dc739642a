//! Scenario (crates/iwarp): our userspace iWARP active side (the `iwarp` crate over
//! tokio TCP) connects through hostfwd (host 127.0.0.1:20049 -> guest :20049) to the
//! guest's knfsd RDMA listener on Linux siw, completes MPA revision 2 (RFC 6581
//! IRD/ORD, RFC 8797 private data), and exchanges one RPC-over-RDMA Version One
//! NFSv3 NULL call and reply, with MPA CRC off and on. Stock siw: the provider's
//! first-send delay (docs/linux-facts.md, "siw accept race") must be enough.
//!
//! A second NULL goes as RDMA_NOMSG with a position-zero Read chunk: knfsd pulls the
//! call out of our registered region with an RDMA Read Request that our side serves.
//!
//! The RPC-over-RDMA header and the RPC call are hand-encoded here (the protocol
//! core lives elsewhere).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use iwarp::{IwarpConfig, IwarpProvider};
use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab};

use crate::common::proc3_delta;
use rdma::{
    Access, ConnectParams, LocalSge, QueuePair, QueuePairExt, RecvWr, SendOp, SendWr, WcOpcode,
    WcStatus,
};

const XID: u32 = 0x1ab0_4e55;
const XID2: u32 = 0x1ab0_4e56;
const XID3: u32 = 0x1ab0_4e57;
/// Bytes of zeros after the third NULL call: knfsd pulls 40 + this many bytes, so our
/// Read Response is one 60 kB FPDU, spread over ~40 TCP segments, that siw must
/// reassemble. (With a 200 kB tail knfsd 6.1 answers RDMA_ERROR/ERR_CHUNK without
/// reading: its own limit on a position-zero Read chunk, not an iWARP matter.)
const BIG_TAIL: usize = 60_000;

/// RFC 8797 private data: magic, version 1, no remote invalidation, 4 KiB inline
/// both ways.
const RPCRDMA_CM_PRIVATE: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3];

/// RPC-over-RDMA v1 RDMA_MSG header (RFC 8166 §4.2): xid, vers 1, credits 32,
/// RDMA_MSG, empty read list, write list, no reply chunk: 28 bytes. Then an ONC RPC
/// call (RFC 5531): NFS (100003) v3 NULL with AUTH_NONE.
fn null_call() -> Bytes {
    let mut b = BytesMut::new();
    for w in [XID, 1, 32, 0, 0, 0, 0] {
        b.put_u32(w);
    }
    assert_eq!(b.len(), 28);
    for w in [XID, 0, 2, 100_003, 3, 0, 0, 0, 0, 0] {
        b.put_u32(w);
    }
    b.freeze()
}

/// The same NULL call, alone (40 bytes), for a position-zero Read chunk.
fn rpc_null_call(xid: u32) -> BytesMut {
    let mut b = BytesMut::new();
    for w in [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0] {
        b.put_u32(w);
    }
    b
}

/// RDMA_NOMSG (RFC 8166 §4.2) whose whole RPC call sits in our memory as one
/// position-zero Read chunk segment: knfsd must pull it with an RDMA Read Request,
/// which our provider serves from the registered region.
fn nomsg_with_read_chunk(xid: u32, stag: u32, len: u32) -> Bytes {
    let mut b = BytesMut::new();
    // xid, vers, credits, RDMA_NOMSG; read list: present, position 0, handle, length,
    // offset (2 words); end of read list; empty write list; no reply chunk.
    for w in [xid, 1, 32, 1, 1, 0, stag, len, 0, 0, 0, 0, 0] {
        b.put_u32(w);
    }
    b.freeze()
}

fn word(b: &[u8], i: usize) -> Option<u32> {
    b.get(i * 4..i * 4 + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

async fn nfs3_null_over_iwarp(crc: bool) -> Result<String, String> {
    let provider = IwarpProvider::new(IwarpConfig {
        crc,
        ..IwarpConfig::default()
    });
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let addr = format!("127.0.0.1:{}", lab::ports::NFS_RDMA)
        .parse()
        .unwrap();
    let qp = provider
        .connect(
            addr,
            &pd,
            ConnectParams {
                private_data: Bytes::from_static(&RPCRDMA_CM_PRIVATE),
                ird: 16,
                ord: 16,
                recvs: Vec::new(),
            },
        )
        .await
        .map_err(|e| format!("connect: {e}"))?;
    if qp.crc() != crc {
        return Err(format!("CRC negotiated {} but wanted {crc}", qp.crc()));
    }
    let peer = qp.peer().clone();
    let pd_bytes = peer.private_data.clone();
    if pd_bytes.get(..4) != Some(&RPCRDMA_CM_PRIVATE[..4]) {
        return Err(format!(
            "knfsd private data is not RFC 8797: {pd_bytes:02x?}"
        ));
    }
    let rx = pd
        .register(BytesMut::zeroed(4096), Access::LOCAL_WRITE)
        .unwrap();
    qp.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![LocalSge {
            mr: rx.clone(),
            offset: 0,
            len: 4096,
        }],
    })
    .map_err(|e| format!("post_recv: {e}"))?;
    qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send,
        sgl: vec![pd.sge(null_call()).unwrap()],
    })
    .map_err(|e| format!("post_send: {e}"))?;
    let mut reply = None;
    for _ in 0..2 {
        let c = tokio::time::timeout(Duration::from_secs(20), qp.completion())
            .await
            .map_err(|_| "no completion within 20 s".to_string())?
            .ok_or_else(|| "queue pair closed".to_string())?;
        if c.status != WcStatus::Success {
            let ev = tokio::time::timeout(Duration::from_secs(1), qp.event()).await;
            return Err(format!("completion {c:?}; event {ev:?}"));
        }
        if c.opcode == WcOpcode::Recv {
            reply = rx.read(0, c.byte_len);
        }
    }
    let body = reply.ok_or("no reply received")?;
    // RPC-over-RDMA reply header: xid, vers 1, credits, RDMA_MSG, three empty lists.
    if word(&body, 0) != Some(XID) || word(&body, 1) != Some(1) || word(&body, 3) != Some(0) {
        return Err(format!(
            "bad RPC-over-RDMA reply header: {:02x?}",
            &body[..body.len().min(28)]
        ));
    }
    // RPC reply: xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
    let rpc: Vec<Option<u32>> = (7..13).map(|i| word(&body, i)).collect();
    if rpc != [Some(XID), Some(1), Some(0), Some(0), Some(0), Some(0)] {
        return Err(format!(
            "NULL reply is not accepted/success: {:02x?}",
            &body[28..]
        ));
    }

    // Second call: the peer pulls the call from us (RDMA Read served by our side).
    let call_mr = pd
        .register(rpc_null_call(XID2), Access::REMOTE_READ)
        .unwrap();
    qp.post_recv(RecvWr {
        wr_id: 3,
        sgl: vec![LocalSge {
            mr: rx.clone(),
            offset: 0,
            len: 4096,
        }],
    })
    .map_err(|e| format!("post_recv: {e}"))?;
    qp.post_send(SendWr {
        wr_id: 4,
        op: SendOp::Send,
        sgl: vec![pd
            .sge(nomsg_with_read_chunk(XID2, call_mr.stag().0, 40))
            .unwrap()],
    })
    .map_err(|e| format!("post_send: {e}"))?;
    let mut reply2 = None;
    for _ in 0..2 {
        let c = tokio::time::timeout(Duration::from_secs(20), qp.completion())
            .await
            .map_err(|_| "no completion for the Read-chunk call within 20 s".to_string())?
            .ok_or_else(|| "queue pair closed".to_string())?;
        if c.status != WcStatus::Success {
            let ev = tokio::time::timeout(Duration::from_secs(1), qp.event()).await;
            return Err(format!("Read-chunk call: completion {c:?}; event {ev:?}"));
        }
        if c.opcode == WcOpcode::Recv {
            reply2 = rx.read(0, c.byte_len);
        }
    }
    let body2 = reply2.ok_or("no reply to the Read-chunk call")?;
    let off = if word(&body2, 3) == Some(0) {
        28
    } else {
        return Err(format!(
            "Read-chunk reply is not RDMA_MSG: {:02x?}",
            &body2[..body2.len().min(28)]
        ));
    };
    let rpc2: Vec<Option<u32>> = (0..6).map(|i| word(&body2[off..], i)).collect();
    if word(&body2, 0) != Some(XID2)
        || rpc2 != [Some(XID2), Some(1), Some(0), Some(0), Some(0), Some(0)]
    {
        return Err(format!(
            "Read-chunk NULL reply is not accepted/success: {body2:02x?}"
        ));
    }
    call_mr.invalidate();

    // Third call: the same, with a 60 kB tail, so the Read Response is large.
    let mut big = rpc_null_call(XID3);
    big.resize(40 + BIG_TAIL, 0);
    let big_mr = pd.register(big, Access::REMOTE_READ).unwrap();
    qp.post_recv(RecvWr {
        wr_id: 5,
        sgl: vec![LocalSge {
            mr: rx.clone(),
            offset: 0,
            len: 4096,
        }],
    })
    .map_err(|e| format!("post_recv: {e}"))?;
    qp.post_send(SendWr {
        wr_id: 6,
        op: SendOp::Send,
        sgl: vec![pd
            .sge(nomsg_with_read_chunk(
                XID3,
                big_mr.stag().0,
                (40 + BIG_TAIL) as u32,
            ))
            .unwrap()],
    })
    .map_err(|e| format!("post_send: {e}"))?;
    let mut reply3 = None;
    for _ in 0..2 {
        let c = tokio::time::timeout(Duration::from_secs(20), qp.completion())
            .await
            .map_err(|_| "no completion for the 60 kB Read-chunk call within 20 s".to_string())?
            .ok_or_else(|| "queue pair closed".to_string())?;
        if c.status != WcStatus::Success {
            let ev = tokio::time::timeout(Duration::from_secs(1), qp.event()).await;
            return Err(format!(
                "60 kB Read-chunk call: completion {c:?}; event {ev:?}"
            ));
        }
        if c.opcode == WcOpcode::Recv {
            reply3 = rx.read(0, c.byte_len);
        }
    }
    let body3 = reply3.ok_or("no reply to the 60 kB Read-chunk call")?;
    if word(&body3, 0) != Some(XID3) || word(&body3, 3) != Some(0) {
        return Err(format!(
            "60 kB Read-chunk reply: {:02x?}",
            &body3[..body3.len().min(40)]
        ));
    }
    let accept = word(&body3, 12);
    big_mr.invalidate();
    qp.disconnect();
    Ok(format!(
        "knfsd IRD {} ORD {}, credits granted {:?}, {} reply bytes; NULL pulled by knfsd \
         with an RDMA Read from our region answered too; 60 kB pull answered \
         (accept_stat {:?})",
        peer.ird,
        peer.ord,
        word(&body, 2),
        body.len(),
        accept
    ))
}

fn run(crc: bool) {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let name = if crc {
        "iwarp-to-knfsd-crc"
    } else {
        "iwarp-to-knfsd"
    };
    // Stock siw both times: with CRC on, it is our MPA Request that asks for it.
    let script = GuestScript::scenario("knfsd-hold").expect("scenario script");
    let mut guest = lab
        .guest(script)
        .run_name(name)
        .forward_knfsd()
        .capture_host_side()
        .shared_boot("knfsd")
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = guest.wait_ready(Duration::from_secs(120));
    let exchange = match ready {
        Ok(()) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(nfs3_null_over_iwarp(crc)),
        Err(e) => Err(format!("guest not ready: {e}")),
    };
    guest.signal("done").expect("signal done");
    let mut outcome = guest.finish().unwrap_or_else(|e| panic!("{e}"));
    if let Ok(info) = &exchange {
        eprintln!("exchange: {info}");
    }
    outcome.host_step("iwarp_mpa_and_nfs3_null", |_| exchange.clone().map(|_| ()));
    outcome.host_step("knfsd_counted_the_call", |o| {
        // This scenario's NULL calls (the shared boot's counters hold others').
        match proc3_delta(o)?.first() {
            Some(&n) if n >= 1 => Ok(()),
            other => Err(format!("knfsd counted {other:?} NFSv3 NULL calls of ours")),
        }
    });
    let pcap = outcome.out_dir.join("host.pcap");
    if let Some(r) = outcome.host_step("capture_check", |_| {
        let check = CaptureCheck {
            min_rpcordma: 2,
            crc: Some(crc),
            ..CaptureCheck::nfs_rdma()
        };
        check_capture(lab.tshark(), &pcap, &check)
    }) {
        eprintln!("capture: {r}");
    }
    outcome.assert_passed();
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn iwarp_active_side_nfs3_null_with_guest_knfsd_crc_off() {
    run(false);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn iwarp_active_side_nfs3_null_with_guest_knfsd_crc_on() {
    run(true);
}
