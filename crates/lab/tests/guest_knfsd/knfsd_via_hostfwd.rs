//! Scenario: a host-side peer reaches the guest's knfsd RDMA listener
//! through hostfwd (host 127.0.0.1:20049 -> guest :20049), completes MPA with
//! siw and gets an NFSv3 NULL answered over RPC-over-RDMA; qemu's host-side
//! capture of it decodes cleanly in tshark; and a host process (python3)
//! reaches the guest's rpc.mountd through the 20048 hostfwd.
//!
//! The peer here is the deliberately tiny iWARP initiator in tests/common: it
//! proves the harness path that scenario 2 (our client -> guest knfsd) and the
//! crates/iwarp scenario will use, with no dependency on project crates. It
//! is the template for those tests: boot `knfsd-hold`, wait for ready, drive
//! the guest from the host, signal done, check the outcome and the capture.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, HostProcess, Lab};

use crate::common::*;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn host_peer_reaches_guest_knfsd_over_siw_via_hostfwd() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let mut guest = lab
        .guest(GuestScript::scenario("knfsd-hold").expect("scenario script"))
        .run_name("knfsd-via-hostfwd")
        .forward_knfsd()
        .capture_host_side()
        .shared_boot("knfsd")
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = guest.wait_ready(Duration::from_secs(120));
    let exchange = match &ready {
        Ok(()) => mpa_then_nfs3_null(lab::ports::NFS_RDMA),
        Err(e) => Err(format!("guest not ready: {e}")),
    };
    // A host process run to completion beside the guest: MOUNT v3 NULL over
    // TCP (record marking) to the guest's rpc.mountd through the 20048
    // hostfwd. (rpcinfo cannot: it asks rpcbind on port 111 first.)
    let mount_null = HostProcess::new("mount-null", "python3").args(["-c", MOUNT_NULL_PY]);
    let mountd = match ready {
        Ok(()) => guest.run_host(&mount_null, Duration::from_secs(30)),
        Err(e) => Err(e),
    };
    // Release the guest whatever happened, so its logs are collected.
    guest.signal("done").expect("signal done");
    let mut outcome = guest.finish().unwrap_or_else(|e| panic!("{e}"));

    outcome.host_step("mpa_and_nfs3_null", |_| exchange.clone());
    outcome.host_step("mountd_via_hostfwd", |_| match &mountd {
        Ok(x) if x.success() && x.log.contains("MOUNT NULL accepted") => Ok(()),
        Ok(x) => Err(format!("mount-null: {:?}: {}", x.status, x.log)),
        Err(e) => Err(e.to_string()),
    });
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
            min_rpcordma: 2, // the call and the reply
            crc: Some(false),
            ..CaptureCheck::nfs_rdma()
        };
        check_capture(lab.tshark(), &pcap, &check)
    }) {
        eprintln!("capture: {r}");
    }
    outcome.assert_passed();
}

const XID: u32 = 0x1ab0_0001;

/// MOUNT (100005) v3 NULL over TCP to 127.0.0.1:20048; exits 0 and prints
/// "MOUNT NULL accepted" on an accepted/success reply.
const MOUNT_NULL_PY: &str = r#"
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", 20048), timeout=20)
call = struct.pack(">10I", 0x4d4e5401, 0, 2, 100005, 3, 0, 0, 0, 0, 0)
s.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
hdr = s.recv(4)
n = struct.unpack(">I", hdr)[0] & 0x7fffffff
rep = b""
while len(rep) < n:
    rep += s.recv(n - len(rep))
words = struct.unpack(">6I", rep[:24])
print("reply words", words)
sys.exit(0 if words == (0x4d4e5401, 1, 0, 0, 0, 0) and print("MOUNT NULL accepted") is None else 1)
"#;

/// MPA v2 (enhanced, no CRC, no markers) then one NFSv3 NULL call as an
/// RPC-over-RDMA v1 RDMA_MSG in an untagged Send; expects the matching
/// accepted/success reply in a Send.
fn mpa_then_nfs3_null(port: u16) -> Result<(), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(&mpa_frame(MPA_REQ_KEY))
        .map_err(|e| format!("send MPA request: {e}"))?;
    let rep = read_mpa(&mut s)?;
    if &rep.key != MPA_REP_KEY {
        return Err(format!("not an MPA reply: {:02x?}", rep.key));
    }
    if rep.flags & 0x20 != 0 {
        return Err("MPA request rejected".into());
    }
    if rep.flags & 0x40 != 0 {
        return Err("knfsd's siw turned on CRC, which we did not ask for".into());
    }
    // Stock siw's accept race (docs/linux-facts.md): pause before the first Send.
    std::thread::sleep(Duration::from_millis(100));

    let mut msg = rpcrdma_msg(XID);
    msg.extend_from_slice(&rpc_call(XID, 100_003, 3, 0));
    send(&mut s, &msg, 1)?;

    let body = read_send(&mut s)?;
    if word(&body, 0) != Some(XID) || word(&body, 1) != Some(1) || word(&body, 3) != Some(0) {
        return Err(format!(
            "bad RPC-over-RDMA reply header: {:02x?}",
            &body[..16.min(body.len())]
        ));
    }
    let off = rpcrdma_header_len(&body).ok_or("truncated RPC-over-RDMA header")?;
    // xid, REPLY(1), MSG_ACCEPTED(0), verf AUTH_NONE(0, 0), SUCCESS(0).
    if body.get(off..off + 24) != Some(&rpc_null_reply(XID)[..]) {
        return Err(format!(
            "NULL reply is not accepted/success: {:02x?}",
            &body[off..]
        ));
    }
    Ok(())
}
