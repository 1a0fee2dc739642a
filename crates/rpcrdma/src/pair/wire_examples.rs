//! The hex examples of docs/rpcrdma-v2.md, produced by the state machines themselves
//! through the pair. Each example is asserted byte for byte here, and the document
//! must contain it verbatim, so the document cannot drift from the code.
//!
//! To regenerate after a deliberate change:
//! `cargo test -p rpcrdma wire_examples -- --nocapture` prints every block.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::options::ReliableReplyInfo;
use crate::requester::RequesterConfig;
use crate::responder::{ReliableReplyConfig, ResponderConfig};
use crate::testutil::{nfs_call, rpc_reply};
use crate::validate::Policy;
use crate::wire::Version;

const DOC: &str = include_str!("../../../../docs/rpcrdma-v2.md");

/// XDR words, eight per line.
fn xdr_hex(b: &[u8]) -> String {
    let words: Vec<String> = b
        .chunks(4)
        .map(|w| w.iter().map(|x| format!("{x:02x}")).collect())
        .collect();
    words
        .chunks(8)
        .map(|l| l.join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(name: &str, bytes: &[u8], expected: &str) {
    let got = xdr_hex(bytes);
    println!("--- {name}\n```text\n{got}\n```");
    if std::env::var_os("RPCRDMA_PRINT_WIRE_EXAMPLES").is_some() {
        return;
    }
    assert_eq!(got, expected.trim(), "{name}: the bytes changed");
    assert!(
        DOC.contains(&format!("```text\n{got}\n```")),
        "docs/rpcrdma-v2.md does not show {name} as:\n{got}"
    );
}

fn client(prefer: Version) -> Requester<TestUlb> {
    Requester::new(
        TestUlb {
            max_reply: 1 << 20,
            ..TestUlb::default()
        },
        RequesterConfig {
            prefer,
            credits: 32,
            reliable_reply: Some(ReliableReplyInfo {
                remote_invalidate: true,
            }),
            backward_credits: Some(2),
            ..RequesterConfig::default()
        },
    )
}

fn server(policy: Policy) -> Responder<TestUlb> {
    Responder::new(
        TestUlb::default(),
        ResponderConfig {
            policy,
            credits: 16,
            reliable_reply: Some(ReliableReplyConfig {
                pull_timeout: Duration::from_secs(5),
                remote_invalidate: true,
            }),
            backward_credits: Some(2),
            ..ResponderConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn wire_examples_version_two_negotiation() {
    // v2 client, v2 server: the probe, its Reply, the option exchange.
    let mut p = Pair::new(client(Version::TWO), server(Policy::default()), 16);
    p.client
        .start_call(Xid(0x1001), nfs_call(0x1001, 0, &[], None))
        .unwrap();
    p.run();
    check(
        "v2 probe: the first Call (NFSv3 NULL) in Version Two, RDMA_MSG",
        &p.sent_by_client[0].bytes,
        "00001001 00000002 00000020 00000000 00000000 00000000 00000001 00000001
c0000001 00100000 00000000 00000000 00001001 00000000 00000002 000186a3
00000003 00000000 00000000 00000000 00000000 00000000",
    );
    check(
        "v2 Reply to the probe",
        &p.sent_by_server[0].bytes,
        "00001001 00000002 00000010 00000000 00000000 00000000 00000000 00001001
00000001 00000000 00000000 00000000 00000000",
    );
    check(
        "RDMA_OPTIONAL(RELIABLE_REPLY) from the requester",
        &p.sent_by_client[1].bytes,
        "00001001 00000002 00000020 00000005 52525031 00000004 00000001",
    );
    check(
        "RDMA_OPTIONAL(RELIABLE_REPLY) answer from the responder",
        &p.sent_by_server[1].bytes,
        "00001001 00000002 00000010 00000005 52525031 00000004 00000001",
    );

    // v2 client, v1-only server: ERR_VERS, then the Call again in v1.
    let mut q = Pair::new(client(Version::TWO), server(Policy::v1_only()), 16);
    q.client
        .start_call(Xid(0x2001), nfs_call(0x2001, 0, &[], None))
        .unwrap();
    q.run();
    check(
        "ERR_VERS from a Version One responder",
        &q.sent_by_server[0].bytes,
        "00002001 00000002 00000010 00000004 00000001 00000001 00000001",
    );
    check(
        "the same Call again in Version One",
        &q.sent_by_client[1].bytes[..16],
        "00002001 00000001 00000020 00000000",
    );
}

#[test]
fn wire_examples_err_inval_option() {
    let mut s = server(Policy::default());
    let unknown = crate::header::Header {
        xid: Xid(0x3001),
        version: Version::TWO,
        credits: 32,
        body: crate::header::Body::Optional {
            opttype: crate::wire::OptType(0x0000_0007),
            optinfo: Bytes::new(),
        },
    };
    check(
        "RDMA_OPTIONAL of an unknown type",
        &unknown.to_bytes(),
        "00003001 00000002 00000020 00000005 00000007 00000000",
    );
    s.handle_receive(unknown.to_bytes());
    let Some(Action::Send { send, .. }) = s.poll_action() else {
        panic!()
    };
    check(
        "ERR_INVAL_OPTION",
        &send.concat(),
        "00003001 00000002 00000010 00000004 00000003",
    );
}

#[test]
fn wire_examples_responder_provided_read_chunk() {
    let mut p = Pair::new(client(Version::TWO), server(Policy::default()), 16);
    p.client
        .start_call(Xid(0x1001), nfs_call(0x1001, 0, &[], None))
        .unwrap();
    p.run();
    assert!(p.client.reliable_reply_on());
    // A Reply of 8 KiB of results (8220 bytes of Payload stream) to a Call that
    // offered no Reply chunk.
    p.server_ulp =
        Box::new(|xid, _| Some(rpc_reply(xid.0, &[], Some(Bytes::from(vec![0xab; 8192])))));
    let c0 = p.sent_by_client.len();
    let s0 = p.sent_by_server.len();
    p.client
        .start_call(Xid(0x1002), nfs_call(0x1002, 1, &[], None))
        .unwrap();
    p.run();
    check(
        "a Call with no Reply chunk (reliable reply on)",
        &p.sent_by_client[c0].bytes[..28],
        "00001002 00000002 00000020 00000000 00000000 00000000 00000000",
    );
    check(
        "RDMA_NOMSG with a responder-provided Position Zero Read chunk",
        &p.sent_by_server[s0].bytes,
        "00001002 00000002 0000000f 00000001 00000001 00000000 50000001 0000201c
00000000 00000000 00000000 00000000 00000000",
    );
    check(
        "RDMA_DONE (sent by Send With Invalidate of STag 0x50000001)",
        &p.sent_by_client[c0 + 1].bytes,
        "00001002 00000002 00000020 00000003",
    );
    assert_eq!(p.sent_by_client[c0 + 1].invalidate, Some(0x5000_0001));
}

#[test]
fn wire_examples_backward_direction() {
    let mut p = Pair::new(client(Version::TWO), server(Policy::default()), 16);
    p.client
        .start_call(Xid(0x1001), nfs_call(0x1001, 0, &[], None))
        .unwrap();
    p.run();
    p.client.open_backward_channel();
    p.server.handle_peer_backward_ready();
    p.run();
    let s0 = p.sent_by_server.len();
    let c0 = p.sent_by_client.len();
    // A backward NULL to the NFSv4 callback program (0x40000000), version 1.
    let mut e = xdr::Encoder::new();
    for w in [0x1001u32, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0] {
        e.u32(w);
    }
    p.server.start_backward_call(e.finish(), ()).unwrap();
    p.run();
    check(
        "backward Call (same XID value as a forward Call: separate XID space)",
        &p.sent_by_server[s0].bytes,
        "00001001 00000002 00000002 00000000 00000000 00000000 00000000 00001001
00000000 00000002 40000000 00000001 00000000 00000000 00000000 00000000
00000000",
    );
    check(
        "backward Reply",
        &p.sent_by_client[c0].bytes,
        "00001001 00000002 00000002 00000000 00000000 00000000 00000000 00001001
00000001 00000000 00000000 00000000 00000000",
    );
}
