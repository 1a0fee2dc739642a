//! Scenario (crates/iwarp): the guest's kernel NFS client (xprtrdma over Linux siw)
//! mounts with proto=rdma against our userspace iWARP passive side, listening on the
//! host's 127.0.0.1:30049 (the guest's 10.0.2.2:30049). Our side reads the MPA
//! Request (RFC 6581 IRD/ORD + RFC 8797 private data), accepts with initial receives
//! posted, answers the kernel's first call (NULL) with a hand-encoded RPC-over-RDMA
//! reply and checks that the next call arrives intact. CRC off, and CRC turned on by
//! our MPA Reply (the kernel's siw does not ask for it).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use iwarp::{IwarpConfig, IwarpProvider};
use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab};
use rdma::{
    Access, ConnectParams, LocalSge, QueuePair, QueuePairExt, RecvWr, SendOp, SendWr, WcOpcode,
    WcStatus,
};

/// NFSv4.1 needs no MOUNT service: the kernel connects straight to the RDMA port.
const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
mkdir -p /mnt/h
mount.nfs 10.0.2.2:/ /mnt/h -n -o vers=4.1,proto=rdma,port=30049,soft,timeo=50,retrans=1 \
  >/share/mount.log 2>&1 &
step wait_for_host lab_wait_for done 150
kill $! 2>/dev/null
umount -l /mnt/h 2>/dev/null
exit 0
"#;

/// RFC 8797: magic, version 1, no remote invalidation, 4 KiB inline both ways.
const RPCRDMA_CM_PRIVATE: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3];

fn word(b: &[u8], i: usize) -> Option<u32> {
    b.get(i * 4..i * 4 + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Length of an RPC-over-RDMA v1 header (RFC 8166 §4.2): four fixed words, then the
/// read list, the write list and the reply chunk.
fn rpcrdma_header_len(b: &[u8]) -> Option<usize> {
    let mut i = 4; // word index
                   // Read list: (present, position, handle, length, offset hi, offset lo)*
    while word(b, i)? != 0 {
        i += 6;
    }
    i += 1;
    // Write list: (present, count, count * segment)*
    while word(b, i)? != 0 {
        let n = word(b, i + 1)? as usize;
        i += 2 + 4 * n;
    }
    i += 1;
    // Reply chunk: optional (count, segments).
    if word(b, i)? != 0 {
        let n = word(b, i + 1)? as usize;
        i += 2 + 4 * n;
    } else {
        i += 1;
    }
    Some(i * 4)
}

async fn serve(mut listener: iwarp::IwarpListener, crc: bool) -> Result<String, String> {
    let req = tokio::time::timeout(Duration::from_secs(150), listener.accept())
        .await
        .map_err(|_| "no connection from the guest's kernel client".to_string())?
        .map_err(|e| format!("accept: {e}"))?;
    let peer = req.peer().clone();
    if peer.private_data.get(..4) != Some(&RPCRDMA_CM_PRIVATE[..4]) {
        return Err(format!(
            "no RFC 8797 private data: {:02x?}",
            peer.private_data
        ));
    }
    let pd = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let rx = pd
        .register(BytesMut::zeroed(8 * 4096), Access::LOCAL_WRITE)
        .unwrap();
    let recvs = (0..8)
        .map(|i| RecvWr {
            wr_id: i,
            sgl: vec![LocalSge {
                mr: rx.clone(),
                offset: i as usize * 4096,
                len: 4096,
            }],
        })
        .collect();
    let qp = req
        .accept(
            &pd,
            ConnectParams {
                private_data: Bytes::from_static(&RPCRDMA_CM_PRIVATE),
                ird: 16,
                ord: 16,
                recvs,
            },
        )
        .await
        .map_err(|e| format!("accept: {e}"))?;
    if qp.crc() != crc {
        return Err(format!("CRC is {} but we wanted {crc}", qp.crc()));
    }
    let recv = || async {
        loop {
            let c = tokio::time::timeout(Duration::from_secs(60), qp.completion())
                .await
                .map_err(|_| "no call within 60 s".to_string())?
                .ok_or_else(|| "connection closed".to_string())?;
            if c.status != WcStatus::Success {
                let ev = tokio::time::timeout(Duration::from_secs(1), qp.event()).await;
                return Err(format!("completion {c:?}; event {ev:?}"));
            }
            if c.opcode == WcOpcode::Recv {
                let off = c.wr_id as usize * 4096;
                return rx
                    .read(off, c.byte_len)
                    .ok_or_else(|| "bad length".to_string());
            }
        }
    };
    let call = recv().await?;
    let xid = word(&call, 0).ok_or("empty Send")?;
    if word(&call, 1) != Some(1) {
        return Err(format!(
            "not RPC-over-RDMA v1: {:02x?}",
            &call[..call.len().min(16)]
        ));
    }
    let off = rpcrdma_header_len(&call).ok_or("truncated RPC-over-RDMA header")?;
    let rpc: Vec<u32> = (0..6).filter_map(|i| word(&call[off..], i)).collect();
    if rpc.len() < 6 || rpc[0] != xid || rpc[1] != 0 || rpc[3] != 100_003 || rpc[5] != 0 {
        return Err(format!("first call is not NFS NULL: {rpc:?}"));
    }
    // Reply: RDMA_MSG header granting 32 credits, then accepted/success.
    let mut reply = BytesMut::new();
    for w in [xid, 1, 32, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0] {
        reply.put_u32(w);
    }
    qp.post_send(SendWr {
        wr_id: 100,
        op: SendOp::Send,
        sgl: vec![pd.sge(reply.freeze()).unwrap()],
    })
    .map_err(|e| format!("post_send: {e}"))?;
    let next = recv().await?;
    let next_off = rpcrdma_header_len(&next).ok_or("next call: truncated header")?;
    let nrpc: Vec<u32> = (0..6).filter_map(|i| word(&next[next_off..], i)).collect();
    if word(&next, 1) != Some(1) || nrpc.get(1) != Some(&0) || nrpc.get(3) != Some(&100_003) {
        return Err(format!("next call is not an NFS call: {nrpc:?}"));
    }
    Ok(format!(
        "kernel client IRD {} ORD {}, RFC 8797 flags {:#x} sizes {}/{}; NULL (NFSv{}) answered; \
         next call NFSv{} proc {} ({} bytes, credits asked {:?})",
        peer.ird,
        peer.ord,
        peer.private_data[5],
        peer.private_data[6],
        peer.private_data[7],
        rpc[4],
        nrpc[4],
        nrpc[5],
        next.len(),
        word(&next, 2)
    ))
}

fn run(crc: bool) {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let provider = IwarpProvider::new(IwarpConfig {
        crc,
        ..IwarpConfig::default()
    });
    let addr = format!("127.0.0.1:{}", lab::ports::HOST_SERVER_RDMA)
        .parse()
        .unwrap();
    let listener = rt
        .block_on(provider.listen(addr))
        .unwrap_or_else(|e| panic!("listen on {addr}: {e}"));
    let server = rt.spawn(serve(listener, crc));
    let name = if crc {
        "kclient-to-iwarp-crc"
    } else {
        "kclient-to-iwarp"
    };
    let guest = lab
        .guest(GuestScript::inline(name, GUEST))
        .run_name(name)
        .capture_host_side()
        .shared_boot("kclient")
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let exchange = rt
        .block_on(server)
        .unwrap_or_else(|e| Err(format!("server task: {e}")));
    guest.signal("done").expect("signal done");
    let mut outcome = guest.finish().unwrap_or_else(|e| panic!("{e}"));
    if let Some(summary) = outcome.host_step("kernel_client_mpa_null_and_next_call", |_| exchange) {
        eprintln!("our passive side: {summary}");
    }
    let pcap = outcome.out_dir.join("host.pcap");
    if let Some(r) = outcome.host_step("capture_check", |_| {
        let check = CaptureCheck {
            ports: vec![lab::ports::HOST_SERVER_RDMA],
            min_rpcordma: 3, // NULL call, our reply, the next call
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
fn guest_kernel_client_reaches_our_iwarp_passive_side_crc_off() {
    run(false);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn guest_kernel_client_reaches_our_iwarp_passive_side_crc_on() {
    run(true);
}
