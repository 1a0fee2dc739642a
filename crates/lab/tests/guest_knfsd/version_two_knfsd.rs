//! Scenario (issue #9, rpcrdma-v2-draft-cel-nfsv4-rpcrdma-version-two-00 §5.2): our
//! client with `RdmaConfig::version_two` opens a connection to the guest's Linux
//! knfsd (svcrdma on stock siw, through the 20049 hostfwd) with a Version Two Call.
//! knfsd speaks only Version One, so it must answer RDMA_ERROR / ERR_VERS with
//! vers_low = vers_high = 1; our client must send the same Call again in Version One,
//! and NFSv3 NULL, GETATTR, WRITE and READ then work at Version One. The outcome is
//! remembered per server: a second connection of the same transport starts in
//! Version One, with no probe and no RDMA_ERROR.
//!
//! Evidence, all asserted:
//! - the transport's counters: first connection 1 version fallback, 1 RDMA_ERROR
//!   received, Calls = Replies + 1 (the probe), last Call in v1; second connection
//!   0 fallbacks, 0 RDMA_ERRORs, every Call in v1, Calls = Replies;
//!   `RdmaTransport::negotiation()` is `Settled(1)` after the first connection;
//! - the capture (qemu's host side), read with tshark: the first RPC-over-RDMA
//!   message on the first connection is ours in version 2, and knfsd's answer with
//!   its XID is RDMA_ERROR (4) / ERR_VERS (1) with vers_low 1 and vers_high 1
//!   (header words decoded from the Send's bytes, since tshark 4.0's RPC-over-RDMA
//!   dissector only takes version 1 headers); every later message of both
//!   connections is version 1; the rest of the capture passes the usual check;
//! - knfsd's own counters: NULLs, a GETATTR, a WRITE and a READ of ours.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use iwarp::IwarpProvider;
use lab::tshark::{analyze_capture, CaptureCheck};
use lab::{GuestScript, Lab};
use nfs3::rdma::Nfs3Binding;
use oncrpc::{Client, ClientConfig, Transport};
use rdma::ConnectionManager;
use rpcrdma::version::Negotiation;
use rpcrdma::Version;
use rpcrdma_transport::{Counter, RdmaConfig, RdmaReceiver, RdmaSender, RdmaTransport};
use xdr::{Decoder, XdrStream};

use super::rdma_client_knfsd::{
    fh_arg, mount_root, nfs_call, root_cred, skip_post_op_attr, GETATTR, LOOKUP, NFS_PROG, NULL,
    READ, WRITE,
};
use crate::common::proc3_delta;

/// Bytes written and read back: more than the 4 KiB inline threshold, so the WRITE
/// goes in a Read chunk and the READ reply in a Write chunk.
const DATA_LEN: usize = 100_000;

/// One `RdmaTransport` behind several `oncrpc::Client`s, one after another: the
/// transport keeps what it learned about the server across its connections.
struct SharedTransport(Arc<RdmaTransport<IwarpProvider>>);

impl Transport for SharedTransport {
    type Sender = RdmaSender<<IwarpProvider as ConnectionManager>::Qp>;
    type Receiver = RdmaReceiver;
    fn connect(&self) -> impl Future<Output = io::Result<(Self::Sender, Self::Receiver)>> + Send {
        let t = self.0.clone();
        async move { t.connect_once().await.map_err(io::Error::from) }
    }
}

fn client(t: &Arc<RdmaTransport<IwarpProvider>>) -> Client {
    Client::new(
        SharedTransport(t.clone()),
        ClientConfig {
            timeout: Duration::from_secs(30),
            cred: root_cred(),
            ..ClientConfig::default()
        },
    )
}

async fn null(c: &Client) -> Result<(), String> {
    c.call(NFS_PROG, 3, NULL, XdrStream::default())
        .await
        .map(|_| ())
        .map_err(|e| format!("NULL: {e}"))
}

async fn getattr_is_dir(c: &Client, fh: &Bytes) -> Result<(), String> {
    let mut d = nfs_call(c, GETATTR, fh_arg(fh).finish()).await?;
    match d.u32().map_err(|e| e.to_string())? {
        2 => Ok(()),
        t => Err(format!("GETATTR root: type {t}, not a directory")),
    }
}

/// What the two connections showed, for the report.
struct Exchange {
    summary: String,
}

async fn drive() -> Result<Exchange, String> {
    let root = mount_root().await?;
    let addr: SocketAddr = format!("127.0.0.1:{}", lab::ports::NFS_RDMA)
        .parse()
        .unwrap();
    let transport = Arc::new(RdmaTransport::new(
        IwarpProvider::default(),
        addr,
        RdmaConfig {
            version_two: true,
            ..RdmaConfig::default()
        },
        Arc::new(Nfs3Binding),
    ));
    let stats = transport.stats();
    if transport.negotiation().is_some() {
        return Err("negotiation state before any connection".into());
    }

    // First connection: the probe (NULL in v2), ERR_VERS, the NULL again in v1.
    let c = client(&transport);
    null(&c).await?;
    getattr_is_dir(&c, &root).await?;
    let mut e = fh_arg(&root);
    e.string(b"hello.txt");
    let mut d = nfs_call(&c, LOOKUP, e.finish()).await?;
    let file = d.opaque(64).map_err(|e| e.to_string())?;
    let data: Bytes = (0..DATA_LEN)
        .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 9) as u8)
        .collect::<Vec<u8>>()
        .into();
    let mut e = fh_arg(&file);
    e.u64(0).u32(DATA_LEN as u32).u32(2); // FILE_SYNC
    e.ddp_opaque(data.clone());
    let mut d = nfs_call(&c, WRITE, e.finish()).await?;
    if d.bool().map_err(|e| e.to_string())? {
        d.opaque_fixed(24).map_err(|e| e.to_string())?;
    }
    skip_post_op_attr(&mut d)?;
    let count = d.u32().map_err(|e| e.to_string())? as usize;
    if count != DATA_LEN {
        return Err(format!("WRITE wrote {count} of {DATA_LEN} bytes"));
    }
    let mut e = fh_arg(&file);
    e.u64(0).u32(DATA_LEN as u32);
    let mut d: Decoder = nfs_call(&c, READ, e.finish()).await?;
    skip_post_op_attr(&mut d)?;
    let _count = d.u32().map_err(|e| e.to_string())?;
    let _eof = d.bool().map_err(|e| e.to_string())?;
    let back = d.opaque(u32::MAX).map_err(|e| e.to_string())?;
    if back != data {
        return Err(format!(
            "READ returned {} bytes that differ from the {DATA_LEN} written",
            back.len()
        ));
    }
    let first = stats.latest().ok_or("no connection stats")?;
    let want = |what: &str, got: u64, want: u64| {
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "first connection: {what} = {got}, expected {want}\n{first}"
            ))
        }
    };
    want("version_fallbacks", first.get(Counter::VersionFallbacks), 1)?;
    want(
        "err_rdma_error_rcvd",
        first.get(Counter::ErrRdmaErrorReceived),
        1,
    )?;
    want(
        "rpcrdma_version (last Call)",
        first.get(Counter::Version),
        1,
    )?;
    // The probe was sent, refused and sent again: one Call more than Replies.
    want(
        "calls - replies",
        first.get(Counter::Calls) - first.get(Counter::Replies),
        1,
    )?;
    if first.get(Counter::ReadChunks) == 0 || first.get(Counter::WriteChunks) == 0 {
        return Err(format!(
            "first connection used no Read or Write chunk\n{first}"
        ));
    }

    // The connection goes; the transport remembers knfsd's version.
    drop(c);
    let end = Instant::now() + Duration::from_secs(20);
    while transport.negotiation().is_none() {
        if Instant::now() >= end {
            return Err("the first connection did not end within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let remembered = transport.negotiation();
    if remembered != Some(Negotiation::Settled(Version::ONE)) {
        return Err(format!(
            "after ERR_VERS the transport remembers {remembered:?}"
        ));
    }

    // Second connection: Version One from the first Call, no probe.
    let c = client(&transport);
    null(&c).await?;
    getattr_is_dir(&c, &root).await?;
    let conns = stats.snapshots();
    if conns.len() != 2 {
        return Err(format!("{} connections, expected 2", conns.len()));
    }
    let second = stats.latest().ok_or("no connection stats")?;
    let want2 = |what: &str, got: u64, want: u64| {
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "second connection: {what} = {got}, expected {want}\n{second}"
            ))
        }
    };
    want2(
        "version_fallbacks",
        second.get(Counter::VersionFallbacks),
        0,
    )?;
    want2(
        "err_rdma_error_rcvd",
        second.get(Counter::ErrRdmaErrorReceived),
        0,
    )?;
    want2("rpcrdma_version", second.get(Counter::Version), 1)?;
    want2(
        "calls - replies",
        second.get(Counter::Calls) - second.get(Counter::Replies),
        0,
    )?;
    drop(c);
    Ok(Exchange {
        summary: format!("first connection:\n{first}\nsecond connection:\n{second}"),
    })
}

/// One RPC-over-RDMA message as the capture carried it: frame, direction, and the
/// first header words (xid, vers, credits, proc, then for RDMA_ERROR errcode,
/// vers_low, vers_high).
#[derive(Debug)]
struct Msg {
    frame: u64,
    tcp_stream: u64,
    from_server: bool,
    words: Vec<u32>,
}

/// The untagged Sends on port 20049 in the capture, in order, with their first
/// header words. tshark 4.0 dissects an RPC-over-RDMA header only when its version
/// word is 1, so the words are read from the segment's bytes (`tcp.payload`, the
/// FPDU that starts it) when tshark left them undissected, else from its
/// `rpcordma.*` fields.
fn rpcrdma_messages(tshark: &Path, pcap: &Path) -> Result<Vec<Msg>, String> {
    let fields = [
        "frame.number",
        "tcp.stream",
        "tcp.srcport",
        "rpcordma.xid",
        "rpcordma.version",
        "rpcordma.flow_control",
        "rpcordma.msg_type",
        "rpcordma.errcode",
        "rpcordma.vers_low",
        "rpcordma.vers_high",
        "tcp.payload",
    ];
    let mut cmd = Command::new(tshark);
    cmd.args(["-n", "-2", "-r"]).arg(pcap);
    cmd.args([
        "-Y",
        "tcp.port == 20049 && iwarp_rdma.opcode >= 3 && iwarp_rdma.opcode <= 6",
    ]);
    cmd.args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().map_err(|e| format!("tshark: {e}"))?;
    if !out.status.success() {
        return Err(format!("tshark: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let num = |s: &str| -> Option<u32> {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        }
    };
    let mut msgs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let col: Vec<&str> = line.split('\t').collect();
        let get = |i: usize| col.get(i).copied().unwrap_or("");
        let words: Vec<u32> = if !get(3).is_empty() {
            (3..10).map_while(|i| num(get(i))).collect()
        } else {
            // The segment starts with an FPDU (tshark found its RDMAP header): MPA
            // length (2), DDP/RDMAP header (18: control, reserved, queue, MSN, offset),
            // then the Send's bytes, if it is the first FPDU of its message.
            let hex: String = get(10).chars().filter(|c| c.is_ascii_hexdigit()).collect();
            let b: Vec<u8> = (0..hex.len() / 2)
                .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                .collect();
            let ulpdu = b
                .get(..2)
                .map_or(0, |l| u16::from_be_bytes([l[0], l[1]]) as usize);
            let first_fpdu = b.len() >= 2 + ulpdu && ulpdu >= 18 && b[2] & 0x80 == 0;
            if !first_fpdu || b[16..20] != [0, 0, 0, 0] {
                continue;
            }
            b[20..2 + ulpdu]
                .chunks_exact(4)
                .take(7)
                .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
                .collect()
        };
        if words.len() < 4 {
            continue;
        }
        msgs.push(Msg {
            frame: get(0).parse().unwrap_or(0),
            tcp_stream: get(1).parse().unwrap_or(0),
            from_server: get(2) == "20049",
            words,
        });
    }
    Ok(msgs)
}

/// The capture shows the probe, knfsd's ERR_VERS 1-1 for it, and Version One after.
fn check_err_vers_on_the_wire(msgs: &[Msg]) -> Result<String, String> {
    let show = || format!("{msgs:#?}");
    let probe = msgs
        .iter()
        .find(|m| !m.from_server)
        .ok_or_else(|| format!("no Call in the capture: {}", show()))?;
    if probe.words[1] != 2 {
        return Err(format!("the first Call is not in version 2: {}", show()));
    }
    let answer = msgs
        .iter()
        .find(|m| m.from_server && m.words[0] == probe.words[0])
        .ok_or_else(|| format!("no answer to the probe's XID: {}", show()))?;
    // xid, vers, credits, RDMA_ERROR (4), ERR_VERS (1), vers_low, vers_high.
    if answer.words.len() < 7 || answer.words[3] != 4 || answer.words[4..7] != [1, 1, 1] {
        return Err(format!(
            "knfsd's answer to the probe (frame {}) is not RDMA_ERROR/ERR_VERS 1-1: {:?}",
            answer.frame, answer.words
        ));
    }
    let later: Vec<&Msg> = msgs.iter().filter(|m| m.frame > answer.frame).collect();
    if let Some(m) = later.iter().find(|m| m.words[1] != 1) {
        return Err(format!(
            "a later message (frame {}) is not version 1: {:?}",
            m.frame, m.words
        ));
    }
    if let Some(m) = later.iter().find(|m| m.from_server && m.words[3] == 4) {
        return Err(format!(
            "another RDMA_ERROR (frame {}): {:?}",
            m.frame, m.words
        ));
    }
    let streams: std::collections::BTreeSet<u64> = later.iter().map(|m| m.tcp_stream).collect();
    if streams.len() != 2 || later.iter().filter(|m| m.words[1] == 2).count() != 0 {
        return Err(format!(
            "expected Version One traffic on two connections after the ERR_VERS: {}",
            show()
        ));
    }
    Ok(format!(
        "probe frame {} (xid {:#x}, version {}), knfsd answered frame {}: RDMA_ERROR \
         ERR_VERS vers_low {} vers_high {} (its header says version {}); then {} Version \
         One messages on {} connections",
        probe.frame,
        probe.words[0],
        probe.words[1],
        answer.frame,
        answer.words[5],
        answer.words[6],
        answer.words[1],
        later.len(),
        streams.len()
    ))
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn version_two_client_falls_back_to_v1_with_guest_knfsd() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let mut guest = lab
        .guest(GuestScript::scenario("knfsd-hold").expect("scenario script"))
        .run_name("version-two-knfsd")
        .forward_knfsd()
        .capture_host_side()
        .shared_boot("knfsd")
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let exchange = match guest.wait_ready(Duration::from_secs(120)) {
        Ok(()) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(drive()),
        Err(e) => Err(format!("guest not ready: {e}")),
    };
    guest.signal("done").expect("signal done");
    let mut outcome = guest.finish().unwrap_or_else(|e| panic!("{e}"));
    if let Some(x) = outcome.host_step("v2_probe_err_vers_then_v1_nfs_and_no_reprobe", |_| {
        exchange
            .as_ref()
            .map(|x| x.summary.clone())
            .map_err(Clone::clone)
    }) {
        eprintln!("our client:\n{x}");
    }
    outcome.host_step("knfsd_counted_our_calls", |o| {
        // null getattr setattr lookup access readlink read write
        let f = proc3_delta(o)?;
        match (f.first(), f.get(1), f.get(6), f.get(7)) {
            (Some(&n), Some(&g), Some(&r), Some(&w)) if n >= 2 && g >= 2 && r >= 1 && w >= 1 => {
                Ok(())
            }
            _ => Err(format!("knfsd's counts of our calls: {f:?}")),
        }
    });
    let pcap = outcome.out_dir.join("host.pcap");
    if let Some(r) = outcome.host_step("capture_shows_err_vers_1_1", |_| {
        check_err_vers_on_the_wire(&rpcrdma_messages(lab.tshark(), &pcap)?)
    }) {
        eprintln!("capture: {r}");
    }
    if let Some(r) = outcome.host_step("capture_check", |_| {
        // The probe and its RDMA_ERROR are the two version-2 headers tshark 4.0
        // cannot dissect (checked above); everything else must be clean.
        let check = CaptureCheck {
            min_rpcordma: 8,
            crc: Some(false),
            allow_rdma_error: true,
            ..CaptureCheck::nfs_rdma()
        };
        let r = analyze_capture(lab.tshark(), &pcap, &check).map_err(|e| e.to_string())?;
        let undissected = r
            .problems
            .iter()
            .filter(|p| p.contains("RPC-over-RDMA header(s) decoded"))
            .count();
        let other: Vec<&String> = r
            .problems
            .iter()
            .filter(|p| !p.contains("RPC-over-RDMA header(s) decoded"))
            .collect();
        if !other.is_empty() || undissected > 2 {
            return Err(format!("capture is not clean: {r}"));
        }
        Ok(r)
    }) {
        eprintln!("capture check: {r}");
    }
    outcome.assert_passed();
}
