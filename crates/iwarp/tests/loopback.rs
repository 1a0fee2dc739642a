//! End-to-end tests between two of our endpoints over real TCP loopback.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use iwarp::IwarpProvider;
use rdma::{
    Access, ConnectError, ConnectParams, DisconnectReason, QpEvent, QueuePair, SendOp, SendWr,
    WcOpcode, WcStatus,
};

async fn sends_of_every_size(crc: bool) {
    let (a, b) = pair(crc).await;
    assert_eq!(a.qp.crc(), crc);
    assert_eq!(b.qp.crc(), crc);
    let sizes = [0usize, 1, 3, 17, 4095, 65_516, 65_517, 200_001, 1 << 20];
    let rx = region(&b.pd, 1 << 20, Access::LOCAL_WRITE);
    for (i, &n) in sizes.iter().enumerate() {
        b.qp.post_recv(recv_wr(&rx, 100 + i as u64, 0, 1 << 20))
            .unwrap();
        let data = pattern(n, i as u8);
        a.qp.post_send(send(&a.qp, i as u64, data.clone())).unwrap();
        let c = next_completion(&a.qp).await;
        assert_eq!(
            (c.wr_id, c.opcode, c.status),
            (i as u64, WcOpcode::Send, WcStatus::Success)
        );
        let c = next_completion(&b.qp).await;
        assert_eq!(c.wr_id, 100 + i as u64);
        assert_eq!(c.opcode, WcOpcode::Recv);
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.byte_len, n, "size {n}");
        assert_eq!(rx.read(0, n).unwrap(), data, "size {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_0_to_1mib_crc_off() {
    sends_of_every_size(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_0_to_1mib_crc_on() {
    sends_of_every_size(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crc_is_on_when_only_the_passive_side_asks() {
    let (a, b) = pair_with(cfg(false), cfg(true)).await;
    assert!(a.qp.crc() && b.qp.crc());
    let rx = region(&b.pd, 64, Access::LOCAL_WRITE);
    b.qp.post_recv(recv_wr(&rx, 1, 0, 64)).unwrap();
    a.qp.post_send(send(&a.qp, 1, Bytes::from_static(b"crc both ways")))
        .unwrap();
    assert_eq!(next_completion(&b.qp).await.byte_len, 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_gathers_several_buffers_and_scatters_into_several() {
    let (a, b) = pair(false).await;
    let rx1 = region(&b.pd, 10, Access::LOCAL_WRITE);
    let rx2 = region(&b.pd, 100_000, Access::LOCAL_WRITE);
    b.qp.post_recv(rdma::RecvWr {
        wr_id: 9,
        sgl: vec![
            rdma::LocalSge {
                mr: rx1.clone(),
                offset: 3,
                len: 7,
            },
            rdma::LocalSge {
                mr: rx2.clone(),
                offset: 1,
                len: 99_999,
            },
        ],
    })
    .unwrap();
    let local = region(&a.pd, 70_000, Access::NONE);
    local.write(0, &pattern(70_000, 9));
    a.qp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::SendWithSolicitedEvent,
        sgl: vec![
            a.pd.sge(Bytes::from_static(b"head")).unwrap(),
            rdma::LocalSge {
                mr: local.clone(),
                offset: 5,
                len: 69_995,
            },
            a.pd.sge(Bytes::from_static(b"tail")).unwrap(),
        ],
    })
    .unwrap();
    let c = next_completion(&b.qp).await;
    assert!(c.solicited);
    assert_eq!(c.byte_len, 4 + 69_995 + 4);
    let mut want = b"head".to_vec();
    want.extend_from_slice(&pattern(70_000, 9)[5..]);
    want.extend_from_slice(b"tail");
    let mut got = rx1.read(3, 7).unwrap().to_vec();
    got.extend_from_slice(&rx2.read(1, want.len() - 7).unwrap());
    assert_eq!(got, want);
}

async fn write_then_read_back(crc: bool, sizes: &[(u64, usize)]) {
    let (a, b) = pair(crc).await;
    let max = sizes.iter().map(|&(o, n)| o as usize + n).max().unwrap();
    let target = region(
        &b.pd,
        max,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let sink = region(&a.pd, max, Access::LOCAL_WRITE);
    for (i, &(off, n)) in sizes.iter().enumerate() {
        let data = pattern(n, 7 + i as u8);
        a.qp.post_send(write(
            &a.qp,
            10 + i as u64,
            target.stag(),
            off,
            data.clone(),
        ))
        .unwrap();
        a.qp.post_send(read(
            20 + i as u64,
            target.stag(),
            off,
            &sink,
            off as usize + 1 - 1,
            n,
        ))
        .unwrap();
        let c = next_completion(&a.qp).await;
        assert_eq!(
            (c.wr_id, c.opcode, c.status),
            (10 + i as u64, WcOpcode::RdmaWrite, WcStatus::Success)
        );
        let c = next_completion(&a.qp).await;
        assert_eq!(
            (c.wr_id, c.opcode, c.status),
            (20 + i as u64, WcOpcode::RdmaRead, WcStatus::Success)
        );
        assert_eq!(c.byte_len, n);
        // Placed at the target, and read back into our sink.
        assert!(
            target.with(|m| m[off as usize..off as usize + n] == data[..]),
            "write {n}@{off}"
        );
        assert!(
            sink.with(|m| m[off as usize..off as usize + n] == data[..]),
            "read {n}@{off}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_write_and_read_odd_offsets_and_lengths_crc_off() {
    write_then_read_back(
        false,
        &[
            (0, 1),
            (3, 1),
            (1, 3),
            (4093, 65_537),
            (7, 1_000_003),
            (13, 64 * 1024 * 1024 - 13),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdma_write_and_read_odd_offsets_and_lengths_crc_on() {
    write_then_read_back(
        true,
        &[
            (5, 1),
            (1, 3),
            (4093, 65_537),
            (7, 1_000_003),
            (11, 64 * 1024 * 1024 - 11),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_length_write_and_read() {
    let (a, b) = pair(false).await;
    let target = region(
        &b.pd,
        16,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let sink = region(&a.pd, 16, Access::LOCAL_WRITE);
    a.qp.post_send(write(&a.qp, 1, target.stag(), 16, Bytes::new()))
        .unwrap();
    a.qp.post_send(read(2, target.stag(), 16, &sink, 16, 0))
        .unwrap();
    assert_eq!(next_completion(&a.qp).await.status, WcStatus::Success);
    let c = next_completion(&a.qp).await;
    assert_eq!((c.wr_id, c.status, c.byte_len), (2, WcStatus::Success, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_operations_in_flight_complete_in_order() {
    let (a, b) = pair_params(
        cfg(true),
        cfg(true),
        ConnectParams {
            ird: 8,
            ord: 3,
            ..Default::default()
        },
    )
    .await;
    const N: usize = 300;
    let target = region(
        &b.pd,
        N * 1000,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    target
        .with_mut(|m| m.copy_from_slice(&pattern(N * 1000, 1)))
        .unwrap();
    let sink = region(&a.pd, N * 1000, Access::LOCAL_WRITE);
    let rx = region(&b.pd, N * 100, Access::LOCAL_WRITE);
    for i in 0..N {
        b.qp.post_recv(recv_wr(&rx, i as u64, i * 100, 100))
            .unwrap();
    }
    // Interleave Reads (ORD 3 at a time), Writes into a separate half, and Sends.
    for i in 0..N {
        let wr = match i % 3 {
            0 => read(
                i as u64,
                target.stag(),
                (i * 1000) as u64,
                &sink,
                i * 1000,
                999,
            ),
            1 => write(
                &a.qp,
                i as u64,
                target.stag(),
                (i * 1000) as u64,
                pattern(1000, i as u8),
            ),
            _ => send(&a.qp, i as u64, pattern(100, i as u8)),
        };
        a.qp.post_send(wr).unwrap();
    }
    for i in 0..N {
        let c = next_completion(&a.qp).await;
        assert_eq!(c.wr_id, i as u64, "send-queue completions in posting order");
        assert_eq!(c.status, WcStatus::Success);
    }
    let mut recvs = 0;
    while recvs < N / 3 {
        let c = next_completion(&b.qp).await;
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.wr_id, recvs as u64);
        recvs += 1;
    }
    let orig = pattern(N * 1000, 1);
    for i in (0..N).step_by(3) {
        assert!(sink.with(|m| m[i * 1000..i * 1000 + 999] == orig[i * 1000..i * 1000 + 999]));
    }
}

/// Runs of large Writes (placed straight from the socket, one read per segment) with
/// small Sends and Writes between them: every byte lands where it belongs and the
/// Sends arrive in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_write_runs_with_small_messages_between_them() {
    let (a, b) = pair(false).await;
    const N: usize = 24;
    let big = |i: usize| 150_000 + i * 7_919;
    let total: usize = (0..N).map(big).sum();
    let target = region(
        &b.pd,
        total + N * 100,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let rx = region(&b.pd, (N + 1) * 64, Access::LOCAL_WRITE);
    for i in 0..=N {
        b.qp.post_recv(recv_wr(&rx, i as u64, i * 64, 64)).unwrap();
    }
    let mut at = 0;
    let mut expect = vec![0u8; total + N * 100];
    for i in 0..N {
        let data = pattern(big(i), i as u8);
        expect[at..at + data.len()].copy_from_slice(&data);
        a.qp.post_send(write(&a.qp, 3 * i as u64, target.stag(), at as u64, data))
            .unwrap();
        at += big(i);
        a.qp.post_send(send(&a.qp, 3 * i as u64 + 1, pattern(1 + i, 100 + i as u8)))
            .unwrap();
        let small = pattern(100, 200 + i as u8);
        let off = total + i * 100;
        expect[off..off + 100].copy_from_slice(&small);
        a.qp.post_send(write(
            &a.qp,
            3 * i as u64 + 2,
            target.stag(),
            off as u64,
            small,
        ))
        .unwrap();
    }
    // A last Send behind the last small Write: a Write's completion at the sender says
    // only that it left, but the stream places in order, so once this Send arrives
    // every Write before it is placed.
    a.qp.post_send(send(&a.qp, 3 * N as u64, pattern(1 + N, 100 + N as u8)))
        .unwrap();
    for i in 0..=3 * N {
        let c = next_completion(&a.qp).await;
        assert_eq!((c.wr_id, c.status), (i as u64, WcStatus::Success));
    }
    for i in 0..=N {
        let c = next_completion(&b.qp).await;
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (i as u64, WcStatus::Success, 1 + i)
        );
        assert!(rx.with(|m| m[i * 64..i * 64 + 1 + i] == pattern(1 + i, 100 + i as u8)[..]));
    }
    assert!(target.with(|m| m[..] == expect[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_exchanges_private_data_and_ird_ord_and_initial_receives_catch_first_sends() {
    let server = IwarpProvider::new(cfg(false));
    let mut l = server.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let pd_b = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let t = tokio::spawn(async move {
        let req = l.accept().await.unwrap();
        assert_eq!(&req.peer().private_data[..], b"client hello");
        assert_eq!((req.peer().ird, req.peer().ord), (5, 6));
        let rx_b = region(&pd_b, 64, Access::LOCAL_WRITE);
        let qp = req
            .accept(
                &pd_b,
                ConnectParams {
                    private_data: Bytes::from_static(b"server hello"),
                    ird: 7,
                    ord: 9,
                    // Posted before the Reply leaves.
                    recvs: vec![recv_wr(&rx_b, 70, 0, 64)],
                },
            )
            .await
            .unwrap();
        // Send at once: the client's initial receive is already there.
        qp.post_send(send(&qp, 71, Bytes::from_static(b"first from server")))
            .unwrap();
        // The Send's completion and the Receive of the client's first Send race
        // (one completion queue for both): accept either order.
        let mut seen = Vec::new();
        for _ in 0..2 {
            let c = next_completion(&qp).await;
            assert_eq!(c.status, WcStatus::Success);
            seen.push((c.wr_id, c.byte_len));
        }
        seen.sort();
        assert_eq!(seen, [(70, 17), (71, 17)]);
        qp
    });
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let rx_a = region(&pd, 64, Access::LOCAL_WRITE);
    let qp = IwarpProvider::new(cfg(false))
        .connect(
            addr,
            &pd,
            ConnectParams {
                private_data: Bytes::from_static(b"client hello"),
                ird: 5,
                ord: 6,
                recvs: vec![recv_wr(&rx_a, 80, 0, 64)],
            },
        )
        .await
        .unwrap();
    qp.post_send(send(&qp, 81, Bytes::from_static(b"first from client")))
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let c = next_completion(&qp).await;
        assert_eq!(c.status, WcStatus::Success);
        seen.push((c.wr_id, c.byte_len));
    }
    seen.sort();
    assert_eq!(seen, [(80, 17), (81, 17)]);
    assert_eq!(&qp.peer().private_data[..], b"server hello");
    // RFC 6581: the responder's ORD is capped by our IRD.
    assert_eq!((qp.peer().ird, qp.peer().ord), (7, 5));
    let _b = t.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_with_private_data_is_a_typed_connect_error() {
    let server = IwarpProvider::new(cfg(false));
    let mut l = server.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let req = l.accept().await.unwrap();
        req.reject(Bytes::from_static(b"no thanks")).await.unwrap();
    });
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let err = IwarpProvider::new(cfg(false))
        .connect(addr, &pd, ConnectParams::default())
        .await
        .unwrap_err();
    match err {
        ConnectError::Rejected { private_data } => assert_eq!(&private_data[..], b"no thanks"),
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_data_over_the_mpa_limit_is_refused_locally() {
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let err = IwarpProvider::new(cfg(false))
        .connect(
            "127.0.0.1:9".parse().unwrap(),
            &pd,
            ConnectParams {
                private_data: vec![0u8; 509].into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConnectError::InvalidParams(_) | ConnectError::Io(_)),
        "{err:?}"
    );
}

fn remote_error(e: QpEvent) -> (u8, u8, u8) {
    match e {
        QpEvent::Disconnected(DisconnectReason::RemoteError { layer, etype, code }) => {
            (layer, etype, code)
        }
        other => panic!("expected a Terminate from the peer, got {other:?}"),
    }
}

fn local_error(e: QpEvent) -> (u8, u8, u8) {
    match e {
        QpEvent::Disconnected(DisconnectReason::LocalError { layer, etype, code }) => {
            (layer, etype, code)
        }
        other => panic!("expected a Terminate sent by us, got {other:?}"),
    }
}

/// Verbs LOCAL_INV as posted work: it completes in send-queue order, after the
/// Write posted before it, and from then on the peer cannot reach the region; an
/// STag that no longer works completes in error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_invalidate_is_posted_work_completed_in_order() {
    let (a, b) = pair(false).await;
    let exposed = region(&a.pd, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let target = region(&b.pd, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let inval = |wr_id, stag| SendWr {
        wr_id,
        op: SendOp::LocalInvalidate(stag),
        sgl: Vec::new(),
    };
    a.qp.post_send(write(&a.qp, 1, target.stag(), 0, pattern(64, 1)))
        .unwrap();
    a.qp.post_send(inval(2, exposed.stag())).unwrap();
    let c1 = next_completion(&a.qp).await;
    let c2 = next_completion(&a.qp).await;
    assert_eq!((c1.wr_id, c1.opcode), (1, WcOpcode::RdmaWrite));
    assert_eq!(
        (c2.wr_id, c2.opcode, c2.status),
        (2, WcOpcode::LocalInvalidate, WcStatus::Success)
    );
    assert!(!exposed.is_valid());
    // Again: the STag no longer works.
    a.qp.post_send(inval(3, exposed.stag())).unwrap();
    let c3 = next_completion(&a.qp).await;
    assert_eq!((c3.wr_id, c3.status), (3, WcStatus::LocalProtectionError));
    // The peer's Write to the invalidated region ends the connection (RFC 5041
    // §7.2: invalid STag).
    b.qp.post_send(write(
        &b.qp,
        4,
        exposed.stag(),
        0,
        Bytes::from_static(b"late"),
    ))
    .unwrap();
    assert_eq!(remote_error(next_event(&b.qp).await), (1, 1, 0));
    assert_eq!(exposed.read(0, 4).unwrap(), Bytes::from_static(&[0; 4]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_to_remotely_invalidated_stag_terminates_only_that_connection() {
    let (a, b) = pair(false).await;
    let (c, d) = pair(false).await;
    let target = region(&b.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rx = region(&b.pd, 64, Access::LOCAL_WRITE);
    b.qp.post_recv(recv_wr(&rx, 1, 0, 64)).unwrap();
    // A Write that works, then Send with Invalidate of that STag.
    a.qp.post_send(write(&a.qp, 1, target.stag(), 0, Bytes::from_static(b"ok")))
        .unwrap();
    a.qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::SendWithInvalidate(target.stag()),
        sgl: vec![a.pd.sge(Bytes::from_static(b"done")).unwrap()],
    })
    .unwrap();
    let rc = next_completion(&b.qp).await;
    assert_eq!(rc.invalidated, Some(target.stag()));
    assert!(!target.is_valid());
    assert_eq!(target.read(0, 2).unwrap(), Bytes::from_static(b"ok"));
    // RFC 5041 §7.2: Write to an invalid STag -> DDP, tagged buffer error, Invalid STag.
    a.qp.post_send(write(
        &a.qp,
        3,
        target.stag(),
        0,
        Bytes::from_static(b"late"),
    ))
    .unwrap();
    assert_eq!(remote_error(next_event(&a.qp).await), (1, 1, 0));
    assert_eq!(local_error(next_event(&b.qp).await), (1, 1, 0));
    assert_eq!(target.read(0, 4).unwrap()[..2], b"ok"[..]);
    assert!(!a.qp.is_connected());
    // The streams close cleanly on both ends: completion queues drain to None.
    while let Some(c) = tokio::time::timeout(
        Duration::from_secs(5),
        rdma::QueuePairExt::completion(&a.qp),
    )
    .await
    .unwrap()
    {
        assert_ne!(c.status, WcStatus::FatalError);
    }
    // The other connection carries on.
    let rx2 = region(&d.pd, 64, Access::LOCAL_WRITE);
    d.qp.post_recv(recv_wr(&rx2, 7, 0, 64)).unwrap();
    c.qp.post_send(send(&c.qp, 8, Bytes::from_static(b"still here")))
        .unwrap();
    assert_eq!(next_completion(&d.qp).await.byte_len, 10);
    assert!(c.qp.is_connected() && d.qp.is_connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_to_locally_invalidated_stag_is_refused() {
    let (a, b) = pair(true).await;
    let target = region(&b.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    target.invalidate();
    a.qp.post_send(write(&a.qp, 1, target.stag(), 0, Bytes::from_static(b"x")))
        .unwrap();
    assert_eq!(remote_error(next_event(&a.qp).await), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_out_of_bounds_is_a_base_bounds_violation() {
    let (a, b) = pair(false).await;
    let target = region(&b.pd, 100, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    a.qp.post_send(write(
        &a.qp,
        1,
        target.stag(),
        99,
        Bytes::from_static(b"xy"),
    ))
    .unwrap();
    assert_eq!(remote_error(next_event(&a.qp).await), (1, 1, 1));
    assert_eq!(local_error(next_event(&b.qp).await), (1, 1, 1));
    assert_eq!(target.read(99, 1).unwrap()[0], 0, "nothing placed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_without_remote_write_right_is_an_access_violation() {
    let (a, b) = pair(false).await;
    let target = region(&b.pd, 100, Access::REMOTE_READ);
    a.qp.post_send(write(&a.qp, 1, target.stag(), 0, Bytes::from_static(b"xy")))
        .unwrap();
    assert_eq!(remote_error(next_event(&a.qp).await), (0, 1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_without_remote_read_right_fails_the_read() {
    let (a, b) = pair(false).await;
    let target = region(&b.pd, 100, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let sink = region(&a.pd, 100, Access::LOCAL_WRITE);
    a.qp.post_send(read(1, target.stag(), 0, &sink, 0, 10))
        .unwrap();
    let c = next_completion(&a.qp).await;
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RemoteAccessError));
    assert_eq!(remote_error(next_event(&a.qp).await), (0, 1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_out_of_bounds_and_unknown_stag_fail_the_read() {
    let (a, b) = pair(false).await;
    let target = region(&b.pd, 100, Access::REMOTE_READ);
    let sink = region(&a.pd, 100, Access::LOCAL_WRITE);
    a.qp.post_send(read(1, target.stag(), 95, &sink, 0, 10))
        .unwrap();
    assert_eq!(
        next_completion(&a.qp).await.status,
        WcStatus::RemoteAccessError
    );
    assert_eq!(remote_error(next_event(&a.qp).await), (0, 1, 1));

    let (a, _b) = pair(false).await;
    let sink = region(&a.pd, 100, Access::LOCAL_WRITE);
    a.qp.post_send(read(1, rdma::STag(0xdead_b000), 0, &sink, 0, 10))
        .unwrap();
    assert_eq!(
        next_completion(&a.qp).await.status,
        WcStatus::RemoteAccessError
    );
    assert_eq!(remote_error(next_event(&a.qp).await), (0, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_without_posted_receive_terminates() {
    let (a, b) = pair(false).await;
    a.qp.post_send(send(&a.qp, 1, Bytes::from_static(b"nobody listens")))
        .unwrap();
    // RFC 5041 §7.2: untagged buffer error, "Invalid MSN - no buffer available".
    assert_eq!(remote_error(next_event(&a.qp).await), (1, 2, 2));
    assert_eq!(local_error(next_event(&b.qp).await), (1, 2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_larger_than_receive_buffer_terminates() {
    let (a, b) = pair(true).await;
    let rx = region(&b.pd, 100, Access::LOCAL_WRITE);
    b.qp.post_recv(recv_wr(&rx, 5, 0, 100)).unwrap();
    b.qp.post_recv(recv_wr(&rx, 6, 0, 100)).unwrap();
    a.qp.post_send(send(&a.qp, 1, pattern(101, 0))).unwrap();
    let c = next_completion(&b.qp).await;
    assert_eq!((c.wr_id, c.status), (5, WcStatus::LocalLengthError));
    let c = next_completion(&b.qp).await;
    assert_eq!((c.wr_id, c.status), (6, WcStatus::Flushed));
    // RFC 5041 §7.2: "DDP Message too long for available buffer".
    assert_eq!(remote_error(next_event(&a.qp).await), (1, 2, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_disconnect_flushes_and_peer_sees_close() {
    let (a, b) = pair(false).await;
    let rx = region(&b.pd, 100, Access::LOCAL_WRITE);
    b.qp.post_recv(recv_wr(&rx, 1, 0, 100)).unwrap();
    a.qp.disconnect();
    assert_eq!(
        next_event(&a.qp).await,
        QpEvent::Disconnected(DisconnectReason::Local)
    );
    assert_eq!(
        next_event(&b.qp).await,
        QpEvent::Disconnected(DisconnectReason::PeerClosed)
    );
    let c = next_completion(&b.qp).await;
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Flushed));
    assert_eq!(
        a.qp.post_send(send(&a.qp, 1, Bytes::new())),
        Err(rdma::PostError::NotConnected)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_vanishing_mid_transfer_fails_outstanding_work() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A raw peer: completes MPA, swallows part of a large Write, then resets.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = bytes::BytesMut::new();
        let req = loop {
            if let Some(r) = iwarp::Responder::handle_request(&mut buf).unwrap() {
                break r;
            }
            s.read_buf(&mut buf).await.unwrap();
        };
        let mut out = Vec::new();
        req.accept(
            &ConnectParams {
                ird: 4,
                ord: 4,
                ..Default::default()
            },
            false,
            &mut out,
        )
        .unwrap();
        s.write_all(&out).await.unwrap();
        go_rx.await.unwrap();
        let mut got = 0usize;
        let mut chunk = vec![0u8; 65536];
        while got < 3 << 20 {
            got += s.read(&mut chunk).await.unwrap();
        }
        drop(s); // closing with unread data sends a reset
    });
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let qp = IwarpProvider::new(cfg(false))
        .connect(
            addr,
            &pd,
            ConnectParams {
                ird: 4,
                ord: 4,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let sink = region(&pd, 16, Access::LOCAL_WRITE);
    let data = Bytes::from(vec![0x5au8; 4 << 20]);
    let wrs: Vec<_> = (0..8)
        .map(|i| write(&qp, i, rdma::STag(0x1000), 0, data.clone()))
        .collect();
    for wr in wrs {
        qp.post_send(wr).unwrap();
    }
    qp.post_send(read(99, rdma::STag(0x1000), 0, &sink, 0, 16))
        .unwrap();
    go_tx.send(()).unwrap();
    peer.await.unwrap();
    match next_event(&qp).await {
        QpEvent::Disconnected(DisconnectReason::Transport(_))
        | QpEvent::Disconnected(DisconnectReason::PeerClosed) => {}
        other => panic!("unexpected {other:?}"),
    }
    let mut statuses = Vec::new();
    while let Some(c) =
        tokio::time::timeout(Duration::from_secs(5), rdma::QueuePairExt::completion(&qp))
            .await
            .unwrap()
    {
        statuses.push((c.wr_id, c.status));
    }
    assert_eq!(
        statuses.len(),
        9,
        "every work request completes: {statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&(99, WcStatus::Flushed)));
    assert!(statuses.iter().any(|s| s.1 == WcStatus::Flushed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posting_checks_local_rights_and_read_credits() {
    let (a, _b) = pair_params(
        cfg(false),
        cfg(false),
        ConnectParams {
            ird: 1,
            ord: 0,
            ..Default::default()
        },
    )
    .await;
    let ro = region(&a.pd, 10, Access::NONE);
    assert_eq!(
        a.qp.post_recv(recv_wr(&ro, 1, 0, 10)),
        Err(rdma::PostError::LocalProtection)
    );
    let rw = region(&a.pd, 10, Access::LOCAL_WRITE);
    assert_eq!(
        a.qp.post_recv(recv_wr(&rw, 1, 5, 10)),
        Err(rdma::PostError::LocalProtection)
    );
    let other_pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let foreign = region(&other_pd, 10, Access::LOCAL_WRITE);
    assert_eq!(
        a.qp.post_recv(recv_wr(&foreign, 1, 0, 10)),
        Err(rdma::PostError::LocalProtection)
    );
    assert_eq!(
        a.qp.post_send(read(1, rdma::STag(1), 0, &rw, 0, 1)),
        Err(rdma::PostError::NoReadCredits)
    );
}

/// Bytes whose drop is observable: `released` turns true when the last handle goes.
struct Watched {
    data: Vec<u8>,
    released: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl AsRef<[u8]> for Watched {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Issue 16: once a Write has completed and its bytes are on the socket, the provider
/// holds no reference to its source, though the connection then idles (no later
/// Write overwrites a retained transmit batch). Both paths: a large Write goes out on
/// the poster's transmit fast path, a small one through the writer task.
async fn write_source_released_after_completion(crc: bool) {
    let (a, b) = pair(crc).await;
    let target = region(
        &b.pd,
        256 * 1024,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    for (i, n) in [256 * 1024, 4096, 256 * 1024].into_iter().enumerate() {
        let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let data = Bytes::from_owner(Watched {
            data: pattern(n, i as u8).to_vec(),
            released: released.clone(),
        });
        a.qp.post_send(write(&a.qp, i as u64, target.stag(), 0, data))
            .unwrap();
        let c = next_completion(&a.qp).await;
        assert_eq!(
            (c.wr_id, c.opcode, c.status),
            (i as u64, WcOpcode::RdmaWrite, WcStatus::Success)
        );
        // The completion may precede the end of the socket write (the bytes are
        // referenced, not copied): allow the write to finish, but not another Write.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !released.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "write {i} ({n} bytes, crc {crc}): source still referenced after its completion"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(a.qp.is_connected() && b.qp.is_connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_source_released_after_completion_crc_off() {
    write_source_released_after_completion(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_source_released_after_completion_crc_on() {
    write_source_released_after_completion(true).await;
}
