//! Scenario: the guest's kernel NFSv3 client mounts the guest's own knfsd
//! (lab/scenarios/kclient-mount.sh with LAB_LOCAL_KNFSD=1), writes and reads
//! back a file (md5 must match), and the captured traffic decodes cleanly in
//! tshark. No project code is involved: this proves the lab, the client
//! script that scenario 1 points at our server, and the capture checker,
//! against two kernel peers: over siw with MPA CRC off (siw's default) and
//! on, and over TCP.

use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab, LabError, Outcome};

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_siw() {
    let mut o = run_local_mount("knfsd-loopback-rdma", "rdma", "stock");
    expect_xprt(&mut o, "rdma");
    expect_md5_match(&mut o);
    expect_clean_rdma_capture(&mut o, false);
    o.assert_passed();
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_siw_with_mpa_crc() {
    let mut o = run_local_mount("knfsd-loopback-rdma-crc", "rdma", "crc");
    expect_xprt(&mut o, "rdma");
    expect_md5_match(&mut o);
    expect_clean_rdma_capture(&mut o, true);
    o.assert_passed();
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_tcp() {
    let mut o = run_local_mount("knfsd-loopback-tcp", "tcp", "stock");
    expect_xprt(&mut o, "tcp");
    expect_md5_match(&mut o);
    o.assert_passed();
}

/// Boot the guest with its own knfsd, mount it over `proto` with siw build
/// `siw`; RDMA runs capture the guest's loopback traffic (the capture costs
/// seconds under TCG, so TCP runs, which check no capture, skip it).
fn run_local_mount(run: &str, proto: &str, siw: &str) -> Outcome {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let mut script = GuestScript::scenario("kclient-mount")
        .expect("scenario script")
        .env("LAB_LOCAL_KNFSD", "1")
        .env("LAB_PROTO", proto)
        .env("LAB_SIW", siw);
    if proto == "rdma" {
        script = script.env("LAB_CAPTURE_IFACE", "lo");
    }
    lab.guest(script)
        .run_name(run)
        .run()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The mount really used `proto`: mountstats says so, not just the options.
fn expect_xprt(o: &mut Outcome, proto: &str) {
    o.host_step(&format!("xprt_is_{proto}"), |o| match o.value("xprt") {
        Some(x) if x.split_whitespace().take(2).eq(["xprt:", proto]) => Ok(()),
        other => Err(format!("mountstats xprt line is {other:?}, not {proto}")),
    });
}

/// The same bytes were seen by the writer, the NFS client and the server.
fn expect_md5_match(o: &mut Outcome) {
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
fn expect_clean_rdma_capture(o: &mut Outcome, crc: bool) {
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
