//! Scenario: the guest's kernel NFSv3 client mounts the guest's own knfsd
//! (lab/scenarios/kclient-mount.sh with LAB_LOCAL_KNFSD=1), writes and reads
//! back a file (md5 must match), and the captured traffic decodes cleanly in
//! tshark. No project code is involved: this proves the lab, the client
//! script that scenario 1 points at our server, and the capture checker,
//! against two kernel peers: over siw with MPA CRC off (siw's default), and over
//! TCP. (With MPA CRC on: tests/knfsd_loopback.rs, which needs another siw build.)

use crate::common::loopback::*;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_siw() {
    let mut o = run_local_mount("knfsd-loopback-rdma", "rdma", "stock", true);
    expect_xprt(&mut o, "rdma");
    expect_md5_match(&mut o);
    expect_clean_rdma_capture(&mut o, false);
    o.assert_passed();
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_tcp() {
    let mut o = run_local_mount("knfsd-loopback-tcp", "tcp", "stock", true);
    expect_xprt(&mut o, "tcp");
    expect_md5_match(&mut o);
    o.assert_passed();
}
