//! Scenario: a host-side peer reaches the guest's knfsd RDMA listener
//! through hostfwd (host 127.0.0.1:20049 -> guest :20049), completes MPA with
//! siw and gets an NFSv3 NULL answered over RPC-over-RDMA; qemu's host-side
//! capture of it decodes cleanly in tshark.
//!
//! The peer here is a deliberately tiny, hand-rolled iWARP initiator: it
//! proves the harness path that scenario 2 (our client -> guest knfsd) and the
//! crates/iwarp scenario will use, with no dependency on project crates. It
//! is the template for those tests: boot `knfsd-hold`, wait for ready, drive
//! the guest from the host, signal done, check the outcome and the capture.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab};

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn host_peer_reaches_guest_knfsd_over_siw_via_hostfwd() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let mut guest = lab
        .guest(GuestScript::scenario("knfsd-hold").expect("scenario script"))
        .run_name("knfsd-via-hostfwd")
        .forward_knfsd()
        .capture_host_side()
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = guest.wait_ready(Duration::from_secs(120));
    let exchange = match ready {
        Ok(()) => mpa_then_nfs3_null(lab::ports::NFS_RDMA),
        Err(e) => Err(format!("guest not ready: {e}")),
    };
    // Release the guest whatever happened, so its logs are collected.
    guest.signal("done").expect("signal done");
    let mut outcome = guest.finish().unwrap_or_else(|e| panic!("{e}"));

    outcome.host_step("mpa_and_nfs3_null", |_| exchange.clone());
    outcome.host_step("knfsd_counted_the_call", |o| {
        // /proc/net/rpc/nfsd "proc3 22 <null> ...": the NULL count is field 3.
        let null_calls = o
            .value("nfsd_proc3")
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|n| n.parse::<u64>().ok());
        match null_calls {
            Some(n) if n >= 1 => Ok(()),
            other => Err(format!("knfsd's NFSv3 NULL count is {other:?}")),
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

const MPA_REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
const MPA_REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
const XID: u32 = 0x1ab0_0001;

/// MPA v2 (enhanced, no CRC, no markers) then one NFSv3 NULL call as an
/// RPC-over-RDMA v1 RDMA_MSG in an untagged Send; expects the matching
/// accepted/success reply in a Send.
fn mpa_then_nfs3_null(port: u16) -> Result<(), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();

    // IRD=16 ORD=16, then RFC 8797 private data: magic, v1, flags 0, 4 KiB/4 KiB.
    let mut pd = vec![0, 16, 0, 16];
    pd.extend_from_slice(&0xf6ab_0e18u32.to_be_bytes());
    pd.extend_from_slice(&[1, 0, 3, 3]);
    let mut req = MPA_REQ_KEY.to_vec();
    req.extend_from_slice(&[0x10, 2]);
    req.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    req.extend_from_slice(&pd);
    s.write_all(&req)
        .map_err(|e| format!("send MPA request: {e}"))?;

    let mut rep = [0u8; 20];
    s.read_exact(&mut rep)
        .map_err(|e| format!("read MPA reply: {e}"))?;
    if &rep[..16] != MPA_REP_KEY {
        return Err(format!("not an MPA reply: {:02x?}", &rep[..16]));
    }
    if rep[16] & 0x20 != 0 {
        return Err("MPA request rejected".into());
    }
    if rep[16] & 0x40 != 0 {
        return Err("knfsd's siw turned on CRC, which we did not ask for".into());
    }
    let mut rep_pd = vec![0u8; u16::from_be_bytes([rep[18], rep[19]]) as usize];
    s.read_exact(&mut rep_pd)
        .map_err(|e| format!("read MPA reply data: {e}"))?;

    // Stock siw's accept race (specs/FACTS.md): pause before the first Send.
    std::thread::sleep(Duration::from_millis(100));

    let mut msg = Vec::new();
    for w in [XID, 1, 32, 0, 0, 0, 0] {
        msg.extend_from_slice(&w.to_be_bytes()); // xid vers credits RDMA_MSG, 3 empty lists
    }
    for w in [XID, 0, 2, 100_003, 3, 0, 0, 0, 0, 0] {
        msg.extend_from_slice(&w.to_be_bytes()); // CALL rpcvers prog vers NULL, AUTH_NONE x2
    }
    s.write_all(&fpdu_send(&msg, 1))
        .map_err(|e| format!("send call: {e}"))?;

    let ulpdu = read_fpdu(&mut s)?;
    let (ddp, rdmap) = (ulpdu[0], ulpdu[1]);
    if ddp & 0x80 != 0 || !(3..=6).contains(&(rdmap & 0x0f)) {
        return Err(format!(
            "expected an untagged Send, got ctrl {ddp:02x} {rdmap:02x}"
        ));
    }
    let body = &ulpdu[18..];
    let word = |i: usize| u32::from_be_bytes(body[i * 4..i * 4 + 4].try_into().unwrap());
    if body.len() < 52 || word(0) != XID || word(1) != 1 || word(3) != 0 {
        return Err(format!(
            "bad RPC-over-RDMA reply header: {:02x?}",
            &body[..16.min(body.len())]
        ));
    }
    // After the 28-byte header: xid, REPLY(1), MSG_ACCEPTED(0), verf(0,0), SUCCESS(0).
    let rpc: Vec<u32> = (7..13).map(word).collect();
    if rpc != [XID, 1, 0, 0, 0, 0] {
        return Err(format!("NULL reply is not accepted/success: {rpc:x?}"));
    }
    Ok(())
}

/// One untagged Send (queue 0, message sequence `msn`) in an FPDU, CRC off.
fn fpdu_send(payload: &[u8], msn: u32) -> Vec<u8> {
    let mut ulpdu = vec![0x41, 0x43]; // DDP: untagged, last, v1; RDMAP: v1, Send
    for w in [0u32, 0, msn, 0] {
        ulpdu.extend_from_slice(&w.to_be_bytes()); // rsvd, queue, MSN, message offset
    }
    ulpdu.extend_from_slice(payload);
    let mut f = (ulpdu.len() as u16).to_be_bytes().to_vec();
    f.extend_from_slice(&ulpdu);
    f.resize(f.len() + (4 - f.len() % 4) % 4, 0);
    f.extend_from_slice(&[0; 4]); // CRC field present, zero when CRC is off
    f
}

fn read_fpdu(s: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)
        .map_err(|e| format!("read FPDU length: {e}"))?;
    let n = u16::from_be_bytes(len) as usize;
    let pad = (4 - (2 + n) % 4) % 4;
    let mut rest = vec![0u8; n + pad + 4];
    s.read_exact(&mut rest)
        .map_err(|e| format!("read FPDU: {e}"))?;
    if n < 18 {
        return Err(format!("FPDU too short for a DDP untagged header: {n}"));
    }
    rest.truncate(n);
    Ok(rest)
}
