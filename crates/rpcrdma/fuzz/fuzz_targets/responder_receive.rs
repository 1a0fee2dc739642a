//! Fuzz a responder connection with arbitrary received Sends and RDMA Read data.
//!
//! Input: byte 0 chooses where the received Send ends; the rest after it is the data
//! the "RDMA Reads" return. Every Call that reaches the upper layer is answered with a
//! reply carrying a DDP-eligible item, so marshal_reply runs against peer-chosen Write
//! and Reply chunks. Properties: nothing panics; every Send we emit parses back as a
//! header, and fits the requester's inline threshold.
//!
//! Reliable reply is negotiated before the fuzzed message (a valid v2 RDMA_OPTIONAL),
//! so v2 Calls whose reply outgrows the threshold go through a responder-provided Read
//! chunk, and a fuzzed RDMA_DONE reaches the pull table. After the message, time runs
//! past the pull timeout; then nothing may stay exposed and no Receive reserved.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rpcrdma::action::Action;
use rpcrdma::reassembly::ReassemblyOptions;
use rpcrdma::responder::{Responder, ResponderConfig, ResponderEvent};
use rpcrdma::rpc::ProcId;
use rpcrdma::ulb::{ReplySizing, UpperLayerBinding};
use rpcrdma::header::Body;
use rpcrdma::options::{ReliableReplyInfo, RELIABLE_REPLY};
use rpcrdma::responder::ReliableReplyConfig;
use rpcrdma::{Header, Limits, PeerLimits, Policy, Segment, Version, Xid};
use std::time::Instant;

struct Ulb;

impl UpperLayerBinding for Ulb {
    fn binds(&self, prog: u32, _vers: u32) -> bool {
        prog == 100_003
    }
    fn reply_sizing(&self, _: ProcId, _: &xdr::XdrStream) -> ReplySizing {
        ReplySizing::default()
    }
    /// Procedure 7 (as NFS WRITE) has one DDP-eligible argument, its first.
    fn call_ddp_positions(&self, p: ProcId, call: &Bytes) -> Option<Vec<u32>> {
        match p.proc_num {
            7 => rpcrdma::ulb::first_argument_position(call),
            _ => Some(Vec::new()),
        }
    }
}

const THRESHOLD: u32 = 4096;

fn check_actions(r: &mut Responder<Ulb>, extra: &[u8], at: &mut usize, now: Instant) {
    while let Some(a) = r.poll_action() {
        match a {
            Action::RdmaRead {
                xid,
                chunk,
                segments,
            } => {
                let len: u64 = segments.iter().map(|s| u64::from(s.length)).sum();
                // The responder bounds reads by the reassembly limit (64 KiB here).
                assert!(len <= 65_536);
                let mut buf = vec![0u8; len as usize];
                for b in buf.iter_mut() {
                    if *at < extra.len() {
                        *b = extra[*at];
                        *at += 1;
                    }
                }
                r.handle_read_done(xid, chunk, Bytes::from(buf));
            }
            Action::Send { send, .. } => {
                let total: usize = send.iter().map(Bytes::len).sum();
                assert!(total <= THRESHOLD as usize);
                Header::parse(&send[0], &Limits::default()).expect("our header parses");
            }
            Action::Register { xid, registrations } => {
                let segs = registrations
                    .iter()
                    .map(|reg| vec![Segment::new(0x5000, reg.len() as u32, 0)])
                    .collect();
                let _ = r.handle_registered(now, xid, segs);
            }
            _ => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let cut = (usize::from(first) * 4).min(rest.len());
    let (msg, extra) = rest.split_at(cut);
    let config = ResponderConfig {
        policy: Policy {
            limits: Limits {
                max_segments_per_chunk: 16,
                max_chunks_per_list: 4,
                max_total_segments: 32,
            },
            ..Policy::default()
        },
        peer: Some(PeerLimits {
            send_threshold: THRESHOLD,
            recv_threshold: THRESHOLD,
            remote_invalidate: true,
        }),
        reassembly: ReassemblyOptions {
            check_counts: true,
            max_len: 65_536,
        },
        reliable_reply: Some(ReliableReplyConfig::default()),
        ..ResponderConfig::default()
    };
    let mut r: Responder<Ulb> = Responder::new(Ulb, config).expect("64 credits");
    let mut at = 0;
    let now = Instant::now();
    let offer = Header {
        xid: Xid(0xffff_0000),
        version: Version::TWO,
        credits: 32,
        body: Body::Optional {
            opttype: RELIABLE_REPLY,
            optinfo: ReliableReplyInfo::default().to_bytes(),
        },
    };
    r.handle_receive(offer.to_bytes());
    check_actions(&mut r, extra, &mut at, now);
    assert!(r.reliable_reply_peer().is_some());
    r.handle_receive(Bytes::copy_from_slice(msg));
    check_actions(&mut r, extra, &mut at, now);
    while let Some(ev) = r.poll_event() {
        if let ResponderEvent::Call { xid, payload, .. } = ev {
            let _ = payload.to_bytes();
            let mut e = xdr::Encoder::new();
            for w in [xid.0, 1, 0, 0, 0, 0] {
                e.u32(w);
            }
            e.ddp_opaque(Bytes::from(vec![7u8; extra.len() % 9000]));
            e.u32(0xfeed);
            let _ = r.send_reply(xid, e.finish());
            check_actions(&mut r, extra, &mut at, now);
        }
    }
    // A second copy of the message: a repeated RDMA_DONE must be dropped silently.
    r.handle_receive(Bytes::copy_from_slice(msg));
    check_actions(&mut r, extra, &mut at, now);
    while r.poll_event().is_some() {}
    if let Some(t) = r.poll_timeout() {
        r.handle_timeout(t);
        check_actions(&mut r, extra, &mut at, t);
    }
    assert_eq!(r.poll_timeout(), None);
    // Three messages were received: never more than three Receives given back.
    assert!(r.poll_reposts() <= 3);
    // A pull that timed out keeps its Receive reserved for a late RDMA_DONE until the
    // connection ends.
    assert!(r.credits().reserved_for_done() <= 1);
    r.handle_disconnect();
    check_actions(&mut r, extra, &mut at, now);
    assert_eq!(r.credits().reserved_for_done(), 0);
});
