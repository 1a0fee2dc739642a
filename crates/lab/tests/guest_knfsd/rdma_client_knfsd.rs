//! Scenario (crates/rpcrdma-transport): our RPC-over-RDMA client, an ordinary
//! `oncrpc::Client` over `rpcrdma_transport::RdmaTransport` on the userspace iWARP
//! provider, drives the guest's Linux knfsd (svcrdma on siw) through the hostfwd
//! (host 127.0.0.1:20049 -> guest :20049): NFSv3 NULL, GETATTR of the export's root,
//! FSINFO, LOOKUP, WRITE of 1 MiB (knfsd pulls it from our Read chunks with RDMA Read)
//! and READ of it back (knfsd pushes it into our Write chunks with RDMA Write), with
//! the credits and inline thresholds knfsd grants, which the test records.
//!
//! The root file handle comes from rpc.mountd over TCP (MOUNT v3 MNT through the
//! 20048 hostfwd), as RFC 8267 has NFSv3 clients do: MOUNT is not bound to RDMA.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use iwarp::IwarpProvider;
use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab};
use nfs3::rdma::Nfs3Binding;
use oncrpc::{AuthSysParms, Client, ClientConfig, OpaqueAuth, TcpTransport};
use rpcrdma_transport::{Counter, RdmaConfig, RdmaTransport};
use xdr::{Decoder, Encoder, XdrStream};

use crate::common::proc3_delta;

pub(crate) const NFS_PROG: u32 = 100_003;
const MOUNT_PROG: u32 = 100_005;
pub(crate) const NULL: u32 = 0;
pub(crate) const GETATTR: u32 = 1;
pub(crate) const LOOKUP: u32 = 3;
pub(crate) const READ: u32 = 6;
pub(crate) const WRITE: u32 = 7;
const FSINFO: u32 = 19;
const ONE_MIB: usize = 1 << 20;

pub(crate) fn root_cred() -> OpaqueAuth {
    AuthSysParms {
        stamp: 1,
        machinename: Bytes::from_static(b"rpcrdma-rs-lab"),
        uid: 0,
        gid: 0,
        gids: oncrpc::Gids::new(&[0]).unwrap(),
    }
    .to_opaque_auth()
}

pub(crate) fn fh_arg(fh: &Bytes) -> Encoder {
    let mut e = Encoder::new();
    e.opaque(fh);
    e
}

pub(crate) async fn nfs_call(c: &Client, proc_: u32, args: XdrStream) -> Result<Decoder, String> {
    let mut r = c
        .call(NFS_PROG, 3, proc_, args)
        .await
        .map_err(|e| format!("NFS proc {proc_}: {e}"))?;
    let status = r.results.u32().map_err(|e| e.to_string())?;
    if status != 0 {
        return Err(format!("NFS proc {proc_}: nfsstat3 {status}"));
    }
    Ok(r.results)
}

pub(crate) fn skip_post_op_attr(d: &mut Decoder) -> Result<(), String> {
    if d.bool().map_err(|e| e.to_string())? {
        d.opaque_fixed(84).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// MOUNT v3 MNT "/export" over TCP: the root file handle.
pub(crate) async fn mount_root() -> Result<Bytes, String> {
    let addr: SocketAddr = format!("127.0.0.1:{}", lab::ports::MOUNTD).parse().unwrap();
    let c = Client::new(
        TcpTransport::new(addr),
        ClientConfig {
            timeout: Duration::from_secs(20),
            cred: root_cred(),
            ..ClientConfig::default()
        },
    );
    let mut e = Encoder::new();
    e.string(b"/export");
    let mut r = c
        .call(MOUNT_PROG, 3, 1, e.finish())
        .await
        .map_err(|e| format!("MNT: {e}"))?;
    let status = r.results.u32().map_err(|e| e.to_string())?;
    if status != 0 {
        return Err(format!("MNT: mountstat3 {status}"));
    }
    r.results.opaque(64).map_err(|e| e.to_string())
}

async fn drive() -> Result<String, String> {
    let root = mount_root().await?;
    let addr: SocketAddr = format!("127.0.0.1:{}", lab::ports::NFS_RDMA)
        .parse()
        .unwrap();
    // Default provider config: the ~50 ms first-send pause stock siw needs.
    let transport = RdmaTransport::new(
        IwarpProvider::default(),
        addr,
        RdmaConfig::default(),
        Arc::new(Nfs3Binding),
    );
    let stats = transport.stats();
    let c = Client::new(
        transport,
        ClientConfig {
            timeout: Duration::from_secs(30),
            cred: root_cred(),
            ..ClientConfig::default()
        },
    );
    // NULL.
    c.call(NFS_PROG, 3, NULL, XdrStream::default())
        .await
        .map_err(|e| format!("NULL: {e}"))?;
    // GETATTR of the root: a directory (NF3DIR = 2).
    let mut d = nfs_call(&c, GETATTR, fh_arg(&root).finish()).await?;
    let ftype = d.u32().map_err(|e| e.to_string())?;
    if ftype != 2 {
        return Err(format!("GETATTR root: type {ftype}, not a directory"));
    }
    // FSINFO: knfsd's largest READ and WRITE.
    let mut d = nfs_call(&c, FSINFO, fh_arg(&root).finish()).await?;
    skip_post_op_attr(&mut d)?;
    let w = |d: &mut Decoder| d.u32().map_err(|e| e.to_string());
    let rtmax = w(&mut d)? as usize;
    let _rtpref = w(&mut d)?;
    let _rtmult = w(&mut d)?;
    let wtmax = w(&mut d)? as usize;
    // LOOKUP the export's file.
    let mut e = fh_arg(&root);
    e.string(b"hello.txt");
    let mut d = nfs_call(&c, LOOKUP, e.finish()).await?;
    let file = d.opaque(64).map_err(|e| e.to_string())?;
    // WRITE 1 MiB, FILE_SYNC, in WRITEs of at most wtmax.
    let data: Bytes = (0..ONE_MIB)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 10) as u8)
        .collect::<Vec<u8>>()
        .into();
    let mut off = 0usize;
    let mut writes = 0;
    while off < ONE_MIB {
        let n = (ONE_MIB - off).min(wtmax.max(4096));
        let mut e = fh_arg(&file);
        e.u64(off as u64).u32(n as u32).u32(2); // FILE_SYNC
        e.ddp_opaque(data.slice(off..off + n));
        let mut d = nfs_call(&c, WRITE, e.finish()).await?;
        // wcc_data: pre_op_attr (bool + 24), post_op_attr.
        if d.bool().map_err(|e| e.to_string())? {
            d.opaque_fixed(24).map_err(|e| e.to_string())?;
        }
        skip_post_op_attr(&mut d)?;
        let count = d.u32().map_err(|e| e.to_string())? as usize;
        if count == 0 {
            return Err(format!("WRITE at {off} wrote nothing"));
        }
        off += count;
        writes += 1;
    }
    // READ it back, in READs of at most rtmax.
    let mut back = Vec::with_capacity(ONE_MIB);
    let mut reads = 0;
    while back.len() < ONE_MIB {
        let n = (ONE_MIB - back.len()).min(rtmax.max(4096));
        let mut e = fh_arg(&file);
        e.u64(back.len() as u64).u32(n as u32);
        let mut d = nfs_call(&c, READ, e.finish()).await?;
        skip_post_op_attr(&mut d)?;
        let _count = d.u32().map_err(|e| e.to_string())?;
        let _eof = d.bool().map_err(|e| e.to_string())?;
        let chunk = d.opaque(u32::MAX).map_err(|e| e.to_string())?;
        if chunk.is_empty() {
            return Err(format!("READ at {} returned nothing", back.len()));
        }
        back.extend_from_slice(&chunk);
        reads += 1;
    }
    if back[..] != data[..] {
        let at = back.iter().zip(data.iter()).position(|(a, b)| a != b);
        return Err(format!(
            "READ data differs from WRITE data (first at {at:?})"
        ));
    }
    let s = stats.latest().ok_or("no connection stats")?;
    let summary = format!(
        "knfsd granted credits={} (we asked {}), inline send={} recv={}, peer IRD={}; \
         rtmax={rtmax} wtmax={wtmax}; {writes} WRITEs, {reads} READs; \
         read_chunks={} write_chunks={} remote_invalidations={} local_invalidations={}\n{s}",
        s.get(Counter::CreditsGranted),
        s.get(Counter::CreditsRequested),
        s.get(Counter::SendThreshold),
        s.get(Counter::RecvThreshold),
        s.get(Counter::PeerIrd),
        s.get(Counter::ReadChunks),
        s.get(Counter::WriteChunks),
        s.get(Counter::RemoteInvalidations),
        s.get(Counter::LocalInvalidations),
    );
    if s.get(Counter::ReadChunks) == 0 || s.get(Counter::WriteChunks) == 0 {
        return Err(format!("no chunks used: {summary}"));
    }
    Ok(summary)
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn rdma_client_drives_guest_knfsd() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let mut guest = lab
        .guest(GuestScript::scenario("knfsd-hold").expect("scenario script"))
        .run_name("rdma-client-knfsd")
        .forward_knfsd()
        .capture_host_side()
        .shared_boot("knfsd")
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    let ready = guest.wait_ready(Duration::from_secs(120));
    let exchange = match ready {
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
    match &exchange {
        Ok(info) => eprintln!("rdma client: {info}"),
        Err(e) => eprintln!("rdma client failed: {e}"),
    }
    outcome.host_step("rdma_client_null_getattr_write_read", |_| {
        exchange.clone().map(|_| ())
    });
    outcome.host_step("knfsd_counted_read_and_write", |o| {
        // null getattr setattr lookup access readlink read write ...: this
        // scenario's READs and WRITEs.
        let f = proc3_delta(o)?;
        match (f.get(6), f.get(7)) {
            (Some(&r), Some(&w)) if r >= 1 && w >= 1 => Ok(()),
            _ => Err(format!("knfsd's counts of our calls: {f:?}")),
        }
    });
    let pcap = outcome.out_dir.join("host.pcap");
    if let Some(r) = outcome.host_step("capture_check", |_| {
        let check = CaptureCheck {
            min_rpcordma: 8,
            crc: Some(false),
            ..CaptureCheck::nfs_rdma()
        };
        check_capture(lab.tshark(), &pcap, &check)
    }) {
        eprintln!("capture: {r}");
    }
    outcome.assert_passed();
}
