//! `verbs-devices`: lists the RDMA devices libibverbs sees, with the attributes the
//! `rdma` API takes from them, and registers memory on each (a 64 KiB buffer with
//! local write, remote write and remote read; 4 KiB of shared bytes with remote read)
//! to show the keys the device gave.
//!
//! One line per fact, `key=value` fields, so the lab scenario can parse it:
//!
//! ```text
//! device rxe0 transport=ib node=1 link=ethernet port=active mtu=1024 max_mr_size=... max_mr=... max_sge=... max_qp_wr=... max_ird=... max_ord=... vendor=0x...:0x...
//! mr rxe0 kind=owned len=65536 lkey=0x... rkey=0x...
//! mr rxe0 kind=shared len=4096 lkey=0x... rkey=0x...
//! ```
//!
//! Exit status 0 when at least one device was listed and every registration worked;
//! 1 with `error: ...` on stderr otherwise (no device is an error here: the tool's
//! job is to show one).

use bytes::{Bytes, BytesMut};
use rdma::{Access, Device};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let devices = verbs::devices().map_err(|e| e.to_string())?;
    if devices.is_empty() {
        return Err("no RDMA device (libibverbs lists none)".into());
    }
    for d in &devices {
        let a = d.attributes();
        let p = d.port();
        let (vendor, part) = d.vendor();
        println!(
            "device {} transport={} node={} link={} port={} mtu={} max_mr_size={} max_mr={} \
             max_sge={} max_qp_wr={} max_ird={} max_ord={} vendor={vendor:#x}:{part:#x}",
            d.name(),
            d.transport(),
            d.node_type(),
            p.link_layer,
            p.state,
            p.active_mtu,
            a.max_mr_size,
            a.max_mr,
            a.max_sge,
            a.max_qp_wr,
            a.max_ird,
            a.max_ord,
        );
    }
    for d in &devices {
        let pd =
            rdma::Device::alloc_pd(d).map_err(|e| format!("{}: ibv_alloc_pd: {e}", d.name()))?;
        let owned = pd
            .register(
                BytesMut::zeroed(64 << 10),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .map_err(|e| format!("{}: ibv_reg_mr (64 KiB, rw): {e}", d.name()))?;
        let shared = pd
            .register_bytes(Bytes::from(vec![0x5a; 4096]), Access::REMOTE_READ)
            .map_err(|e| format!("{}: ibv_reg_mr (4 KiB shared, r): {e}", d.name()))?;
        // A pooled buffer (as the transport's Read sinks and chunks): half of it lent
        // to the device.
        let pool = rdma::BufferPool::new(1 << 20);
        let buf = pool.get(64 << 10);
        let pooled = pd
            .register_pooled(
                &buf,
                0..(32 << 10),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .map_err(|e| format!("{}: ibv_reg_mr (32 KiB pooled, rw): {e}", d.name()))?;
        for (kind, mr) in [("owned", &owned), ("shared", &shared), ("pooled", &pooled)] {
            let rkey = mr.rkey().ok_or("a region with remote rights has no rkey")?;
            println!(
                "mr {} kind={kind} len={} lkey={:#x} rkey={:#x}",
                d.name(),
                mr.len(),
                mr.lkey().0,
                rkey.0
            );
        }
        let back = shared.deregister_bytes();
        if back.len() != 4096 || back.iter().any(|&b| b != 0x5a) {
            return Err(format!(
                "{}: shared bytes changed by registration",
                d.name()
            ));
        }
    }
    Ok(())
}
