//! Captures our own loopback traffic with tcpdump and has tshark's iWARP dissectors
//! (`iwarp_mpa`, `iwarp_ddp_rdmap`) decode it: zero malformed frames, every CRC good.
//!
//! Needs `tcpdump` (with permission to capture on `lo`) and `tshark`
//! (`apt-get install tcpdump tshark`). Set `IWARP_CAPTURE_OUT=<path>` to keep the pcap.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use iwarp::IwarpProvider;
use rdma::{Access, ConnectParams, QueuePair, SendOp, SendWr, WcStatus};

fn require(tool: &str) {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        ok,
        "`{tool}` is not installed: this test needs tcpdump and tshark (apt-get install tcpdump tshark)"
    );
}

/// FPDUs that fit one loopback TCP segment.
fn small_fpdus(crc: bool) -> iwarp::IwarpConfig {
    let mut c = cfg(crc);
    c.limits.max_ulpdu = ULPDU;
    c
}

const ULPDU: usize = 16_000;

async fn traffic(port: u16, crc: bool, server: &mut iwarp::IwarpListener) {
    let pd_b = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let pd_a = rdma::software::SoftwarePd::new(rdma::DeviceAttributes::SOFTWARE);
    let client = IwarpProvider::new(small_fpdus(crc));
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let params = ConnectParams {
        ird: 4,
        ord: 4,
        private_data: Bytes::from_static(b"iwarp tshark test"),
        recvs: Vec::new(),
    };
    let (a, b) = tokio::join!(client.connect(addr, &pd_a, params.clone()), async {
        server
            .accept()
            .await
            .unwrap()
            .accept(&pd_b, params.clone())
            .await
    });
    let (a, b) = (a.unwrap(), b.unwrap());
    let rx = region(&pd_b, 300_000, Access::LOCAL_WRITE);
    let target = region(
        &pd_b,
        300_000,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let sink = region(&pd_a, 300_000, Access::LOCAL_WRITE);
    for i in 0..4 {
        b.post_recv(recv_wr(&rx, i, 0, 300_000)).unwrap();
    }
    a.post_send(send(&a, 1, Bytes::new())).unwrap();
    a.post_send(send(&a, 2, pattern(100, 1))).unwrap();
    a.post_send(send(&a, 3, pattern(200_003, 2))).unwrap();
    a.post_send(write(&a, 4, target.stag(), 5, pattern(150_001, 3)))
        .unwrap();
    a.post_send(read(5, target.stag(), 5, &sink, 1, 150_001))
        .unwrap();
    a.post_send(SendWr {
        wr_id: 6,
        op: SendOp::SendWithInvalidate(target.stag()),
        sgl: vec![pd_a.sge(pattern(33, 4)).unwrap()],
    })
    .unwrap();
    for _ in 0..6 {
        assert_eq!(next_completion(&a).await.status, WcStatus::Success);
    }
    for _ in 0..4 {
        assert_eq!(next_completion(&b).await.status, WcStatus::Success);
    }
    // A violation, so a Terminate is on the wire too: the STag was just invalidated.
    a.post_send(write(&a, 7, target.stag(), 0, pattern(10, 5)))
        .unwrap();
    let _ = next_event(&a).await;
    let _ = next_event(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tshark_decodes_our_traffic_with_no_malformed_frames_and_good_crcs() {
    require("tcpdump");
    require("tshark");
    let mut server = IwarpProvider::new(small_fpdus(false))
        .listen("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let port = server.local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("iwarp-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("loopback.pcap");
    let mut dump = Command::new("tcpdump")
        .args([
            "-i",
            "lo",
            "-U",
            "--immediate-mode",
            "-B",
            "32768",
            "-s",
            "0",
            "-w",
        ])
        .arg(&pcap)
        .args(["tcp", "port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tcpdump");
    // Wait until tcpdump is capturing.
    let mut err = BufReader::new(dump.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(
        line.contains("listening on"),
        "tcpdump could not capture on lo: {line}"
    );
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));

    traffic(port, true, &mut server).await;
    traffic(port, false, &mut server).await;

    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = Command::new("kill")
        .args(["-INT", &dump.id().to_string()])
        .status();
    dump.wait().unwrap();
    if let Ok(out) = std::env::var("IWARP_CAPTURE_OUT") {
        std::fs::copy(&pcap, out).unwrap();
    }

    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        // Our payloads are not RPC-over-RDMA; keep its heuristic dissector out.
        .args([
            "--disable-protocol",
            "rpcordma",
            "-V",
            "-O",
            "iwarp_mpa,iwarp_ddp_rdmap",
        ])
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |s: &str| text.matches(s).count();
    assert_eq!(
        count("Malformed"),
        0,
        "tshark reports malformed frames:\n{text}"
    );
    assert_eq!(count("Bad CRC"), 0, "tshark reports bad CRCs");
    assert_eq!(
        count("Request frame header"),
        2,
        "both MPA Requests decoded"
    );
    assert_eq!(
        count("OpCode: Terminate (0x7)"),
        2,
        "both Terminates captured and decoded"
    );
    assert_eq!(count("Reply frame header"), 2, "both MPA Replies decoded");
    let good = count("(Good CRC32)");
    assert!(
        good >= 15,
        "expected the CRC connection's FPDUs checked good, saw {good}"
    );
    for op in [
        "Send (0x3)",
        "Write (0x0)",
        "Read Request (0x1)",
        "Read Response (0x2)",
        "Send with Invalidate (0x4)",
    ] {
        assert!(text.contains(&format!("OpCode: {op}")), "no {op} decoded");
    }
    assert!(text.contains("Error Code for DDP Tagged Buffer: Invalid STag (0x00)"));
    let _ = std::fs::remove_dir_all(&dir);
}
