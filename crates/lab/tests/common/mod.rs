//! A deliberately tiny iWARP + RPC-over-RDMA peer for the harness's own
//! tests (MPA revision 2 enhanced, CRC off, untagged Sends only). It lets the
//! lab prove its host<->guest paths before the project's crates/iwarp can
//! drive them; project scenarios use the real provider instead.
#![allow(dead_code)] // each test binary uses a different subset

pub(crate) mod loopback;

/// A fresh, empty host directory for a scenario's export, writable by everyone: the
/// guest's root is squashed to nobody (our nfsd's default), and nobody must write.
pub(crate) fn writable_export(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let export = std::env::temp_dir().join(format!("lab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&export);
    std::fs::create_dir_all(&export).unwrap();
    std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
    export
}

/// knfsd's NFSv3 per-procedure counts (`/proc/net/rpc/nfsd` "proc3 22 null getattr
/// ..."; index 0 is NULL) that this scenario caused: knfsd-hold.sh records them
/// before (`nfsd_proc3_before`) and after (`nfsd_proc3`) the host's work, and in a
/// shared boot other scenarios' calls are in both.
pub(crate) fn proc3_delta(o: &lab::Outcome) -> Result<Vec<u64>, String> {
    let counts = |key: &str| -> Result<Vec<u64>, String> {
        let line = o.value(key).ok_or(format!("no {key} recorded"))?;
        Ok(line
            .split_whitespace()
            .skip(2)
            .filter_map(|n| n.parse().ok())
            .collect())
    };
    let (before, after) = (counts("nfsd_proc3_before")?, counts("nfsd_proc3")?);
    if before.len() != after.len() || after.is_empty() {
        return Err(format!("proc3 counts before {before:?}, after {after:?}"));
    }
    Ok(after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect())
}

use std::io::{Read, Write};
use std::net::TcpStream;

pub(crate) const MPA_REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
pub(crate) const MPA_REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// RFC 8797 private data format identifier.
pub(crate) const RPCRDMA_CM_MAGIC: u32 = 0xf6ab_0e18;

/// An MPA frame: key, flags (0x10 = enhanced; no CRC, no markers),
/// revision 2, private data = IRD/ORD 16/16 + RFC 8797 (v1, 4 KiB/4 KiB).
pub(crate) fn mpa_frame(key: &[u8; 16]) -> Vec<u8> {
    let mut pd = vec![0, 16, 0, 16];
    pd.extend_from_slice(&RPCRDMA_CM_MAGIC.to_be_bytes());
    pd.extend_from_slice(&[1, 0, 3, 3]);
    let mut f = key.to_vec();
    f.extend_from_slice(&[0x10, 2]);
    f.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    f.extend_from_slice(&pd);
    f
}

/// An MPA Request or Reply as received.
pub(crate) struct MpaFrame {
    pub(crate) key: [u8; 16],
    pub(crate) flags: u8,
    pub(crate) revision: u8,
    pub(crate) private_data: Vec<u8>,
}

pub(crate) fn read_mpa(s: &mut TcpStream) -> Result<MpaFrame, String> {
    let mut h = [0u8; 20];
    s.read_exact(&mut h)
        .map_err(|e| format!("read MPA frame: {e}"))?;
    let mut pd = vec![0u8; u16::from_be_bytes([h[18], h[19]]) as usize];
    s.read_exact(&mut pd)
        .map_err(|e| format!("read MPA private data: {e}"))?;
    Ok(MpaFrame {
        key: h[..16].try_into().unwrap(),
        flags: h[16],
        revision: h[17],
        private_data: pd,
    })
}

/// One untagged Send (queue 0, message sequence `msn`) in an FPDU, CRC off.
pub(crate) fn fpdu_send(payload: &[u8], msn: u32) -> Vec<u8> {
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

/// Read one FPDU and return the payload of the untagged Send it carries.
pub(crate) fn read_send(s: &mut TcpStream) -> Result<Vec<u8>, String> {
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
    let (ddp, rdmap) = (rest[0], rest[1]);
    if ddp & 0x80 != 0 || !(3..=6).contains(&(rdmap & 0x0f)) {
        return Err(format!(
            "expected an untagged Send, got ctrl {ddp:02x} {rdmap:02x}"
        ));
    }
    Ok(rest[18..n].to_vec())
}

pub(crate) fn send(s: &mut TcpStream, payload: &[u8], msn: u32) -> Result<(), String> {
    s.write_all(&fpdu_send(payload, msn))
        .map_err(|e| format!("send: {e}"))
}

/// Big-endian word `i` of `b`.
pub(crate) fn word(b: &[u8], i: usize) -> Option<u32> {
    b.get(i * 4..i * 4 + 4)
        .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
}

/// An RPC-over-RDMA v1 RDMA_MSG header with empty chunk lists.
pub(crate) fn rpcrdma_msg(xid: u32) -> Vec<u8> {
    [xid, 1, 32, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

/// Length of a v1 header (fixed part plus the three chunk lists), so the
/// RPC message after it can be found.
pub(crate) fn rpcrdma_header_len(m: &[u8]) -> Option<usize> {
    let mut i = 4; // words: xid vers credits proc
    while word(m, i)? != 0 {
        i += 6; // discriminator, position, handle, length, offset(2)
    }
    i += 1;
    while word(m, i)? != 0 {
        let n = word(m, i + 1)? as usize;
        i += 2 + 4 * n;
    }
    i += 1;
    if word(m, i)? != 0 {
        i += 2 + 4 * word(m, i + 1)? as usize;
    } else {
        i += 1;
    }
    Some(i * 4)
}

/// An accepted, successful RPC reply with no results (e.g. to NULL).
pub(crate) fn rpc_null_reply(xid: u32) -> Vec<u8> {
    [xid, 1, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

/// An RPC call with AUTH_NONE and no arguments.
pub(crate) fn rpc_call(xid: u32, prog: u32, vers: u32, proc_: u32) -> Vec<u8> {
    [xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}
