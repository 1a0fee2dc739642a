//! The guest kernel NFSv3 client against the guest's own knfsd
//! (lab/scenarios/kclient-mount.sh with LAB_LOCAL_KNFSD=1): the shared part of
//! the loopback scenarios (tests/knfsd_loopback.rs: MPA CRC on, its own boot with
//! the CRC siw build; guest_knfsd/knfsd_loopback.rs: CRC off and TCP, in the
//! shared knfsd boot).

use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab, LabError, Outcome};

/// Boot the guest with its own knfsd (or use the shared knfsd boot), mount it
/// over `proto` with siw build `siw`; RDMA runs capture the guest's loopback traffic (the capture costs
/// seconds under TCG, so TCP runs, which check no capture, skip it).
pub(crate) fn run_local_mount(run: &str, proto: &str, siw: &str, shared: bool) -> Outcome {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let mut script = GuestScript::scenario("kclient-mount")
        .expect("scenario script")
        .env("LAB_LOCAL_KNFSD", "1")
        .env("LAB_PROTO", proto)
        .env("LAB_SIW", siw);
    if proto == "rdma" {
        script = script.env("LAB_CAPTURE_IFACE", "lo");
    }
    let guest = lab.guest(script).run_name(run);
    // The shared knfsd boot (guest_knfsd) forwards knfsd's ports for its other
    // scenarios; this one does not use them.
    let guest = if shared {
        guest.forward_knfsd().shared_boot("knfsd")
    } else {
        guest
    };
    guest.run().unwrap_or_else(|e| panic!("{e}"))
}

/// The mount really used `proto`: mountstats says so, not just the options.
pub(crate) fn expect_xprt(o: &mut Outcome, proto: &str) {
    o.host_step(&format!("xprt_is_{proto}"), |o| match o.value("xprt") {
        Some(x) if x.split_whitespace().take(2).eq(["xprt:", proto]) => Ok(()),
        other => Err(format!("mountstats xprt line is {other:?}, not {proto}")),
    });
}

/// The same bytes were seen by the writer, the NFS client and the server.
pub(crate) fn expect_md5_match(o: &mut Outcome) {
    o.host_step("md5_match", |o| {
        let sums: Vec<&str> = ["/tmp/data", "/mnt/a/data", "/export/data"]
            .iter()
            .map(|f| o.value(&format!("md5:{f}")).unwrap_or("missing"))
            .collect();
        if sums[0] != "missing" && sums.iter().all(|s| *s == sums[0]) {
            Ok(())
        } else {
            Err(format!("md5 sums differ: {sums:?}"))
        }
    });
}

/// tshark decodes every FPDU; no malformed RPC-over-RDMA frame; CRC as
/// expected; and the data moved through chunks: RDMA Write (READ data) and
/// RDMA Read (WRITE data).
pub(crate) fn expect_clean_rdma_capture(o: &mut Outcome, crc: bool) {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let pcap = o.share_file("capture.pcap");
    let report = o.host_step("capture_check", |_| {
        let check = CaptureCheck {
            min_rpcordma: 20, // 1 MiB written and read back is far more
            crc: Some(crc),
            ..CaptureCheck::nfs_rdma()
        };
        let r = check_capture(lab.tshark(), &pcap, &check)?;
        for op in ["RDMA Write", "RDMA Read Request", "RDMA Read Response"] {
            if !r.rdmap_ops.contains_key(op) {
                return Err(LabError::Tshark(format!("no {op} in capture: {r}")));
            }
        }
        Ok(r)
    });
    if let Some(r) = report {
        eprintln!("capture: {r}");
    }
}
