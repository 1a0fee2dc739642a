//! Scenario: the guest's kernel NFSv3 client mounts the guest's own knfsd
//! over RDMA (siw), writes and reads back a file (md5 must match), and the
//! captured traffic decodes cleanly in tshark. No project code is involved:
//! this proves the lab and the capture checker against two kernel peers,
//! once with MPA CRC off (siw's default) and once with it on.

use lab::tshark::{check_capture, CaptureCheck};
use lab::{GuestScript, Lab};

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_siw() {
    loopback("stock", false);
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_siw_with_mpa_crc() {
    loopback("crc", true);
}

/// Run `lab/scenarios/knfsd-loopback.sh` with siw build `siw` and check
/// the result; `crc`: whether every captured FPDU must carry a good CRC.
fn loopback(siw: &str, crc: bool) {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let script = GuestScript::scenario("knfsd-loopback")
        .expect("scenario script")
        .env("LAB_SIW", siw);
    let mut outcome = lab
        .guest(script)
        .run_name(&format!("knfsd-loopback-{siw}"))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));

    // The mount really went over RDMA: mountstats says so, not just the
    // mount options.
    outcome.host_step("xprt_is_rdma", |o| match o.value("xprt") {
        Some(x) if x.split_whitespace().take(2).eq(["xprt:", "rdma"]) => Ok(()),
        other => Err(format!("mountstats xprt line is {other:?}, not rdma")),
    });
    // The same bytes were seen by the writer, the NFS client and the server.
    outcome.host_step("md5_match", |o| {
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
    // tshark decodes every FPDU; no malformed RPC-over-RDMA frame; the data
    // moved by RDMA Write (READ) and RDMA Read (WRITE), i.e. through chunks.
    let pcap = outcome.share_file("capture.pcap");
    let report = outcome.host_step("capture_check", |_| {
        let check = CaptureCheck {
            min_rpcordma: 20, // 1 MiB written and read back is far more
            crc: Some(crc),
            ..CaptureCheck::nfs_rdma()
        };
        let r = check_capture(lab.tshark(), &pcap, &check)?;
        for op in ["RDMA Write", "RDMA Read Request", "RDMA Read Response"] {
            if !r.rdmap_ops.contains_key(op) {
                return Err(lab::LabError::Tshark(format!("no {op} in capture: {r}")));
            }
        }
        Ok(r)
    });
    if let Some(r) = &report {
        eprintln!("capture: {r}");
    }
    outcome.assert_passed();
}
