//! Scenario skeleton for "guest kernel client -> our server on the host":
//! the guest's kernel NFS client (xprtrdma over siw) connects to a peer
//! listening on the host's 127.0.0.1:30049 as 10.0.2.2:30049, completes MPA
//! with RFC 8797 private data, sends NULL, gets our reply and goes on to its
//! next call; qemu's host-side capture of that decodes cleanly in tshark.
//!
//! The peer is the tiny one in tests/common, run in a thread; scenario 1
//! replaces it with the project's NFS server as a `HostProcess` and runs
//! lab/scenarios/kclient-mount.sh (see lab/README.md).

use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab};

use crate::common::*;

/// NFSv4.1 needs no MOUNT service, so the kernel connects straight to the
/// RDMA port (v3 would first ask MOUNT over TCP, which the tiny peer lacks).
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

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn guest_kernel_client_reaches_a_host_rdma_peer() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let listener = TcpListener::bind(("127.0.0.1", lab::ports::HOST_SERVER_RDMA))
        .unwrap_or_else(|e| panic!("bind 127.0.0.1:30049 for the host peer: {e}"));
    let peer = thread::spawn(move || serve_one_client(listener, Duration::from_secs(150)));
    let guest = lab
        .guest(GuestScript::inline("kclient-to-host-peer", GUEST))
        .capture_host_side()
        .shared_boot("kclient")
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let exchange = peer
        .join()
        .unwrap_or_else(|_| Err("host peer panicked".into()));
    guest.signal("done").expect("signal done");
    let mut outcome = guest.finish().unwrap_or_else(|e| panic!("{e}"));

    if let Some(summary) = outcome.host_step("kernel_client_mpa_null_and_next_call", |_| exchange) {
        eprintln!("host peer: {summary}");
    }
    let pcap = outcome.out_dir.join("host.pcap");
    if let Some(r) = outcome.host_step("capture_check", |_| {
        let check = CaptureCheck {
            ports: vec![lab::ports::HOST_SERVER_RDMA],
            min_rpcordma: 3, // NULL call, our reply, the next call
            crc: Some(false),
            ..CaptureCheck::nfs_rdma()
        };
        check_capture(lab.tshark(), &pcap, &check)
    }) {
        eprintln!("capture: {r}");
    }
    outcome.assert_passed();
}

/// Accept one connection (bounded wait), answer MPA and the NULL call, and
/// read the client's next call. Returns a one-line summary.
fn serve_one_client(listener: TcpListener, limit: Duration) -> Result<String, String> {
    listener.set_nonblocking(true).unwrap();
    let end = Instant::now() + limit;
    let mut s: TcpStream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < end => {
                thread::sleep(Duration::from_millis(100))
            }
            Err(e) => return Err(format!("no connection from the guest's client: {e}")),
        }
    };
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_nodelay(true).unwrap();

    let req = read_mpa(&mut s)?;
    if &req.key != MPA_REQ_KEY || req.revision != 2 || req.flags & 0x10 == 0 {
        return Err(format!(
            "unexpected MPA request: key {:02x?} flags {:02x} rev {}",
            req.key, req.flags, req.revision
        ));
    }
    // RFC 6581 IRD/ORD, then RFC 8797: magic, version 1, flags, sizes.
    let pd = &req.private_data;
    if word(pd, 1) != Some(RPCRDMA_CM_MAGIC) {
        return Err(format!("no RFC 8797 private data: {pd:02x?}"));
    }
    let inline = |b: u8| (b as usize + 1) * 1024;
    let cm = format!(
        "RFC 8797 v{} flags {:#x} send {} recv {}",
        pd[8],
        pd[9],
        inline(pd[10]),
        inline(pd[11])
    );
    std::io::Write::write_all(&mut s, &mpa_frame(MPA_REP_KEY))
        .map_err(|e| format!("send MPA reply: {e}"))?;

    let call = read_send(&mut s)?;
    let xid = word(&call, 0).ok_or("empty Send")?;
    let off = rpcrdma_header_len(&call).ok_or("truncated RPC-over-RDMA header")?;
    let rpc: Vec<u32> = (0..6).filter_map(|i| word(&call[off..], i)).collect();
    if rpc.len() < 6 || rpc[1] != 0 || rpc[3] != 100_003 || rpc[5] != 0 {
        return Err(format!("first call is not NFS NULL: {rpc:?}"));
    }
    let mut reply = rpcrdma_msg(xid);
    reply.extend_from_slice(&rpc_null_reply(xid));
    send(&mut s, &reply, 1)?;

    let next = read_send(&mut s)?;
    let off = rpcrdma_header_len(&next).ok_or("truncated RPC-over-RDMA header")?;
    let show = |w: Option<u32>| w.map_or("?".to_string(), |v| v.to_string());
    Ok(format!(
        "{cm}; NULL (NFSv{}) answered; next call: NFSv{} proc {}",
        rpc[4],
        show(word(&next[off..], 4)),
        show(word(&next[off..], 5))
    ))
}
