//! Scenario: the guest's kernel NFSv3 client mounts the guest's own knfsd
//! (lab/scenarios/kclient-mount.sh with LAB_LOCAL_KNFSD=1) over siw with MPA CRC
//! on, writes and reads back a file (md5 must match), and the captured traffic
//! decodes cleanly in tshark with every CRC good. No project code is involved.
//!
//! It needs the siw build that asks for CRC on every connection (`LAB_SIW=crc`),
//! so it has a boot of its own; the same scenario with CRC off (stock siw) and
//! over TCP runs in the shared knfsd boot (tests/guest_knfsd/knfsd_loopback.rs).

mod common;

use common::loopback::*;

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn kernel_nfsv3_client_to_guest_knfsd_over_siw_with_mpa_crc() {
    let mut o = run_local_mount("knfsd-loopback-rdma-crc", "rdma", "crc", false);
    expect_xprt(&mut o, "rdma");
    expect_md5_match(&mut o);
    expect_clean_rdma_capture(&mut o, true);
    o.assert_passed();
}
