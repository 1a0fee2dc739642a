//! Fuzz a requester connection with arbitrary received Sends.
//!
//! Two Calls are outstanding (one with a Write chunk and a Reply chunk, registered as
//! fixed segments); the input is a sequence of received messages (2-byte big-endian
//! length prefix each). Properties: nothing panics; every event completes a Call we
//! made or is a backward Call; at most our two Calls (plus the reliable-reply
//! advertisement) are ever outstanding (a Reply cannot complete a Call twice or one we
//! never made). Every Reply is then put back together from placed memory the size of
//! what was registered (`Requester::assemble_reply`): a Reply or a typed error.
//!
//! Reliable reply is configured, so once a v2 Reply settles the version the requester
//! advertises it, and an RDMA_OPTIONAL answer in the input turns it on: RDMA_NOMSG
//! with a Position Zero Read chunk is then pulled ("RDMA Read" returns zeros, or fails
//! above 1 MiB) and every RDMA_DONE we send must be a 16-byte v2 header.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rpcrdma::action::Action;
use rpcrdma::requester::{PlacedBytes, ReplyParts, Requester, RequesterConfig, RequesterEvent};
use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use rpcrdma::header::{Body, Header};
use rpcrdma::options::ReliableReplyInfo;
use rpcrdma::{Limits, Segment, Version, Xid};

struct Ulb;

impl UpperLayerBinding for Ulb {
    fn binds(&self, _: u32, _: u32) -> bool {
        true
    }
    fn reply_sizing(&self, p: ProcId, _: &xdr::XdrStream) -> ReplySizing {
        if p.proc_num == 6 {
            ReplySizing {
                max_reply: 9000,
                ddp_results: vec![4096],
            }
        } else {
            ReplySizing {
                max_reply: 100,
                ddp_results: vec![],
            }
        }
    }
    fn call_ddp_positions(&self, _: ProcId, _: &Bytes) -> Option<Vec<u32>> {
        Some(Vec::new())
    }
    /// The READ-like result's data goes back at the end of the reduced stream.
    fn reply_ddp_offsets(&self, p: ProcId, reply: &Bytes) -> Option<Vec<usize>> {
        (p.proc_num == 6).then(|| vec![reply.len()])
    }
}

fn call(xid: u32, proc_num: u32) -> xdr::XdrStream {
    let mut e = xdr::Encoder::new();
    for w in [xid, 0, 2, 100_003, 3, proc_num, 0, 0, 0, 0] {
        e.u32(w);
    }
    e.finish()
}

fn drain(r: &mut Requester<Ulb>) {
    while let Some(a) = r.poll_action() {
        if let Action::RdmaRead {
            xid,
            chunk,
            segments,
        } = &a
        {
            let len: u64 = segments.iter().map(|s| u64::from(s.length)).sum();
            if len > 1 << 20 {
                r.handle_read_failed(*xid);
            } else {
                r.handle_read_done(*xid, *chunk, Bytes::from(vec![0u8; len as usize]));
            }
            continue;
        }
        if let Action::Send { send, .. } = &a {
            let h = Header::parse(&send[0], &Limits::default()).expect("our header parses");
            if h.header.body == Body::Done {
                assert_eq!(h.header.version, Version::TWO);
                assert_eq!(send.iter().map(Bytes::len).sum::<usize>(), 16);
            }
            continue;
        }
        if let Action::Register { xid, registrations } = a {
            let segs = registrations
                .iter()
                .enumerate()
                .map(|(i, reg)| {
                    vec![Segment::new(
                        0x100 + i as u32,
                        reg.len() as u32,
                        0x1000 * i as u64,
                    )]
                })
                .collect();
            let _ = r.handle_registered(xid, segs);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Requester::new(
        Ulb,
        RequesterConfig {
            prefer: if data.first().is_some_and(|b| b & 1 == 1) {
                Version::TWO
            } else {
                Version::ONE
            },
            backward_credits: Some(2),
            reliable_reply: Some(ReliableReplyInfo {
                remote_invalidate: data.first().is_some_and(|b| b & 2 == 2),
            }),
            ..RequesterConfig::default()
        },
    );
    let _ = r.start_call(Xid(1), call(1, 6));
    drain(&mut r);
    let mut rest = data.get(1..).unwrap_or_default();
    let mut started_second = false;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let msg = Bytes::copy_from_slice(&rest[2..2 + len]);
        rest = &rest[2 + len..];
        r.handle_receive(msg);
        drain(&mut r);
        while let Some(ev) = r.poll_event() {
            if let Some(parts) = ReplyParts::of(&ev) {
                // Call 1's Write chunk (4096) and Reply chunk (9000), as registered.
                let mut placed = PlacedBytes {
                    reply: Some(Bytes::from(vec![0u8; 9000])),
                    writes: vec![Bytes::from(vec![0u8; 4096])],
                };
                if let Ok(full) = r.assemble_reply(parts, &mut placed) {
                    assert!(full.len() <= parts.inline.len() + 9000 + 4096 + 3);
                }
            }
            match ev {
                RequesterEvent::Reply { xid, .. } | RequesterEvent::Failed { xid, .. } => {
                    assert!(xid == Xid(1) || xid == Xid(2));
                }
                RequesterEvent::BackwardCall { xid, .. } => {
                    let mut e = xdr::Encoder::new();
                    for w in [xid.0, 1, 0, 0, 0, 0] {
                        e.u32(w);
                    }
                    let _ = r.send_backward_reply(xid, e.finish());
                    drain(&mut r);
                }
            }
        }
        let c = r.credits();
        assert!(c.outstanding() <= 3);
        if !started_second && c.available() > 0 {
            started_second = r.start_call(Xid(2), call(2, 1)).is_ok();
            drain(&mut r);
        }
    }
});
