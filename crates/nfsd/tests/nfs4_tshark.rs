//! Wireshark's NFSv4 dissector, an independent reading of RFC 5662, decodes what our
//! server answers: a mount's first exchanges (EXCHANGE_ID, CREATE_SESSION,
//! RECLAIM_COMPLETE, SEQUENCE + PUTROOTFH + GETATTR of every attribute served, LOOKUPs
//! down to the export with GETFH, ACCESS and GETATTR, SECINFO_NO_NAME, the session
//! teardown) made against the real server over TCP, the calls and replies as they
//! crossed the socket written to a pcap. tshark must find every reply NFS4_OK, no
//! malformed packet and no expert warning or error.
//!
//! Needs `tshark` (`apt-get install tshark`), as `crates/nfs4/tests/tshark_compound.rs`:
//! without it the test fails, it does not skip. `NFS4_PCAP_OUT=<path>` keeps the
//! capture.

mod common;

use std::process::{Command, Stdio};

use common::TempDir;
use nfs4::compound::{Compound4Args, Compound4Res, NfsArgop4, NfsResop4};
use nfs4::fh::*;
use nfs4::session::*;
use nfs4::*;
use nfsd::server::Bound;
use oncrpc::ReplyHeader;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Bytes, Decode, Decoder};

fn call(xid: u32, args: &Compound4Args) -> Bytes {
    common::root_call(
        b"tshark-client",
        xid,
        NFS4_PROGRAM,
        NFS_V4,
        NFSPROC4_COMPOUND,
        args,
    )
}

/// Sends `msg` as one record and reads the reply record.
async fn roundtrip(sock: &mut TcpStream, msg: &Bytes) -> Bytes {
    let mut rec = (0x8000_0000u32 | msg.len() as u32).to_be_bytes().to_vec();
    rec.extend_from_slice(msg);
    sock.write_all(&rec).await.unwrap();
    let mut mark = [0u8; 4];
    sock.read_exact(&mut mark).await.unwrap();
    let mark = u32::from_be_bytes(mark);
    assert_ne!(mark & 0x8000_0000, 0, "one fragment");
    let mut reply = vec![0; (mark & 0x7fff_ffff) as usize];
    sock.read_exact(&mut reply).await.unwrap();
    Bytes::from(reply)
}

/// A classic pcap (Ethernet) of one TCP connection, 10.0.0.1:871 to 10.0.0.2:2049,
/// with its handshake and computed checksums (as in the nfs4 crate's tshark test).
struct Pcap {
    out: Vec<u8>,
    seq: [u32; 2],
    t: u32,
}

fn csum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Pcap {
    fn new() -> Pcap {
        let mut out = Vec::new();
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        let mut p = Pcap {
            out,
            seq: [1000, 5000],
            t: 0,
        };
        p.segment(0, 0x02, &[]);
        p.seq[0] += 1;
        p.segment(1, 0x12, &[]);
        p.seq[1] += 1;
        p.segment(0, 0x10, &[]);
        p
    }

    fn segment(&mut self, from: usize, flags: u8, payload: &[u8]) {
        let ends = [([10u8, 0, 0, 1], 871u16), ([10, 0, 0, 2], 2049)];
        let (src, dst) = (ends[from], ends[1 - from]);
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&src.1.to_be_bytes());
        tcp.extend_from_slice(&dst.1.to_be_bytes());
        tcp.extend_from_slice(&self.seq[from].to_be_bytes());
        let ack = if flags == 0x02 { 0 } else { self.seq[1 - from] };
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src.0);
        pseudo.extend_from_slice(&dst.0);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(&tcp);
        let c = csum(&pseudo);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        ip.extend_from_slice(&src.0);
        ip.extend_from_slice(&dst.0);
        let c = csum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut frame = vec![
            2,
            0,
            0,
            0,
            0,
            (2 - from) as u8,
            2,
            0,
            0,
            0,
            0,
            (1 + from) as u8,
        ];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&tcp);
        self.t += 1;
        self.out.extend_from_slice(&self.t.to_le_bytes());
        self.out.extend_from_slice(&0u32.to_le_bytes());
        self.out
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&frame);
        self.seq[from] = self.seq[from].wrapping_add(payload.len() as u32);
    }

    fn record(&mut self, from: usize, msg: &[u8]) {
        let mut rec = (0x8000_0000u32 | msg.len() as u32).to_be_bytes().to_vec();
        rec.extend_from_slice(msg);
        self.segment(from, 0x18, &rec);
    }
}

fn tshark(pcap: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("`tshark` runs (apt-get install tshark)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The connection to the server and the capture of what crossed it.
struct Capture {
    sock: TcpStream,
    pcap: Pcap,
    xid: u32,
}

impl Capture {
    /// One COMPOUND of minor version 1, which must succeed.
    async fn exchange(&mut self, ops: Vec<NfsArgop4>) -> Compound4Res {
        self.xid += 1;
        let c = call(
            self.xid,
            &Compound4Args {
                tag: "".into(),
                minorversion: 1,
                argarray: ops,
            },
        );
        let r = roundtrip(&mut self.sock, &c).await;
        self.pcap.record(0, &c);
        self.pcap.record(1, &r);
        let mut d = Decoder::new(r);
        ReplyHeader::decode(&mut d).unwrap();
        let res = Compound4Res::decode(&mut d).unwrap();
        assert_eq!(res.status, NfsStat4::NFS4_OK, "{res:?}");
        res
    }
}

#[tokio::test]
async fn tshark_decodes_the_servers_replies_to_a_mounts_first_exchanges() {
    let dir = TempDir::new("nfs4-tshark");
    std::fs::write(dir.path().join("f"), b"hello").unwrap();
    let mut bound = Bound::new(&common::loopback_config(dir.path()))
        .await
        .unwrap();
    bound.serve_nfs4();
    let export = bound.server().table().exports[0].export.path.clone();
    let addr = bound.nfs_addr().unwrap();
    let serving = common::serve(bound);
    let mut c = Capture {
        sock: TcpStream::connect(addr).await.unwrap(),
        pcap: Pcap::new(),
        xid: 0x4000,
    };
    let res = c
        .exchange(vec![NfsArgop4::ExchangeId(ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: *b"tsharkvf",
                co_ownerid: "Linux NFSv4.1 tshark".into(),
            },
            eia_flags: EXCHGID4_FLAG_SUPP_MOVED_REFER
                | EXCHGID4_FLAG_SUPP_MOVED_MIGR
                | EXCHGID4_FLAG_BIND_PRINC_STATEID,
            eia_state_protect: StateProtect4A::None,
            eia_client_impl_id: None,
        })])
        .await;
    let NfsResop4::ExchangeId(Res4::Ok(ex)) = &res.resarray[0] else {
        unreachable!()
    };
    let attrs = ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1_049_620,
        ca_maxresponsesize: 1_049_480,
        ca_maxresponsesize_cached: 7584,
        ca_maxoperations: 16,
        ca_maxrequests: 64,
        ca_rdma_ird: None,
    };
    let res = c
        .exchange(vec![NfsArgop4::CreateSession(CreateSession4Args {
            csa_clientid: ex.eir_clientid,
            csa_sequence: ex.eir_sequenceid,
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: attrs.clone(),
            csa_back_chan_attrs: attrs,
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: vec![CallbackSecParms4::AuthNone],
        })])
        .await;
    let NfsResop4::CreateSession(Res4::Ok(cs)) = &res.resarray[0] else {
        unreachable!()
    };
    let sid = cs.csr_sessionid;
    let seq = |n| {
        NfsArgop4::Sequence(Sequence4Args {
            sa_sessionid: sid,
            sa_sequenceid: n,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        })
    };
    // Every attribute number up to 75: the server returns those it serves.
    let all = GetAttr4Args {
        // Without 48 and 54 (time_access_set, time_modify_set): write-only.
        attr_request: Bitmap4(vec![u32::MAX, !(1 << 16 | 1 << 22), 0x0000_0800]),
    };
    c.exchange(vec![
        seq(1),
        NfsArgop4::ReclaimComplete(ReclaimComplete4Args { rca_one_fs: false }),
    ])
    .await;
    c.exchange(vec![
        seq(2),
        NfsArgop4::PutRootFh,
        NfsArgop4::GetFh,
        NfsArgop4::GetAttr(all.clone()),
    ])
    .await;
    let mut ops = vec![seq(3), NfsArgop4::PutRootFh];
    for c in export.iter().skip(1) {
        use std::os::unix::ffi::OsStrExt;
        ops.push(NfsArgop4::Lookup(Lookup4Args {
            objname: Utf8Str::from(c.as_bytes()),
        }));
    }
    ops.extend([
        NfsArgop4::GetFh,
        NfsArgop4::Access(Access4Args { access: 0x3f }),
        NfsArgop4::GetAttr(all.clone()),
        NfsArgop4::Lookup(Lookup4Args {
            objname: "f".into(),
        }),
        NfsArgop4::GetAttr(all),
        NfsArgop4::SecInfoNoName(SecInfoStyle4::SECINFO_STYLE4_CURRENT_FH),
    ]);
    c.exchange(ops).await;
    c.exchange(vec![
        seq(4),
        NfsArgop4::DestroySession(DestroySession4Args { dsa_sessionid: sid }),
    ])
    .await;
    c.exchange(vec![NfsArgop4::DestroyClientId(DestroyClientId4Args {
        dca_clientid: ex.eir_clientid,
    })])
    .await;
    serving.stop().await;

    let path = dir.path().join("server.pcap");
    std::fs::write(&path, &c.pcap.out).unwrap();
    if let Ok(out) = std::env::var("NFS4_PCAP_OUT") {
        std::fs::copy(&path, out).unwrap();
    }
    let verbose = tshark(&path, &["-V"]);
    assert!(!verbose.contains("Malformed"), "malformed:\n{verbose}");
    let problems: Vec<&str> = verbose
        .lines()
        .filter(|l| {
            l.contains("[Severity level: Warning]") || l.contains("[Severity level: Error]")
        })
        .collect();
    assert!(problems.is_empty(), "{problems:?}\n{verbose}");
    // tshark's reading of every reply's status, and the operations it saw.
    let status = tshark(
        &path,
        &[
            "-Y",
            "rpc.msgtyp == 1",
            "-T",
            "fields",
            "-e",
            "nfs.nfsstat4",
        ],
    );
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 7, "{status}");
    for l in &lines {
        assert!(
            l.split(',').all(|s| s == "0"),
            "a status not NFS4_OK: {status}"
        );
    }
    let ops = tshark(
        &path,
        &["-Y", "rpc.msgtyp == 1", "-T", "fields", "-e", "nfs.opcode"],
    );
    for op in [
        "42", "43", "58", "53", "24", "10", "9", "15", "3", "52", "44", "57",
    ] {
        assert!(
            ops.split([',', '\n']).any(|o| o == op),
            "opcode {op} in {ops}"
        );
    }
}
