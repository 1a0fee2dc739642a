//! Our NFS client on the rdma-core verbs provider against the guest's knfsd (issue
//! 14): the `nfs` binary runs in the guest and, over soft-RoCE `rxe0` (siw0 taken
//! off eth0 for that run, `--rdma-provider verbs`) and then over soft-iWARP `siw0`
//! (rxe0 removed again, `--rdma-provider auto`, which must pick verbs), opens its
//! connection with a Version Two Call (`--rdma-version 2`), falls back to Version
//! One on knfsd's ERR_VERS, PUTs 64 MiB (WRITEs whose data knfsd pulls by RDMA Read
//! from our registered regions) and GETs it back (READ data RDMA-Written by knfsd
//! into our Write chunks): md5 of the original, the copy read back and knfsd's file
//! equal. Checked from the client's own report (`nfs -v`): RPC-over-RDMA version 1
//! in use after one fallback, Read and Write chunks, 64 MiB of chunk data received;
//! from NFS_LOG: the provider chosen names the device (`verbs on rxe0`, `verbs on
//! siw0 (auto)`).
//!
//! Client and server are in one guest (rdma_cm loops the device's traffic back), as
//! the other verbs scenarios; two guests are not set up yet.

use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
step knfsd_up lab_knfsd_up
siw0_back() {
  rdma link show siw0/1 >/dev/null 2>&1 || rdma link add siw0 type siw netdev eth0
}
lab_on_exit siw0_back
lab_on_exit lab_rxe_down
step make sh -c 'head -c 67108864 /dev/urandom > /tmp/big'
transfer() {
  out="$LAB_RUN_DIR/nfs-$1"
  NFS_LOG=nfsclient=info /share/bin/nfs -q -v -t rdma --rdma-provider $2 --rdma-version 2 \
    --nfs-port 20049 --mount-port 20048 --timeout 120 put /tmp/big 10.0.2.15:/export/big-$1 \
    2>"$out-put.txt" || { cat "$out-put.txt"; return 1; }
  NFS_LOG=nfsclient=info /share/bin/nfs -q -v -t rdma --rdma-provider $2 --rdma-version 2 \
    --nfs-port 20049 --mount-port 20048 --timeout 120 get 10.0.2.15:/export/big-$1 /tmp/back-$1 \
    2>"$out-get.txt" || { cat "$out-get.txt"; return 1; }
  cat "$out-put.txt" "$out-get.txt"
  lab_same_md5 /tmp/big /tmp/back-$1 /export/big-$1
  rm -f /tmp/back-$1 /export/big-$1
}
step siw0_away rdma link delete siw0
step rxe_up lab_rxe_up
step verbs_rxe transfer rxe verbs
step rxe_down lab_rxe_down
step siw0_back siw0_back
step verbs_siw transfer siw auto
exit 0
"#;

/// Checks one run's client reports: the provider line names `device`, and each
/// transfer's `nfs: rdma ...` line shows version 1 after one fallback, chunks, and
/// at least 64 MiB of chunk data received for the GET.
fn check_run(put: &str, get: &str, device: &str) -> Result<(), String> {
    for (what, text) in [("put", put), ("get", get)] {
        if !text.lines().any(|l| {
            l.contains("NFS over RDMA") && l.contains(&format!("provider=verbs on {device}"))
        }) {
            return Err(format!("{what}: no verbs provider line in:\n{text}"));
        }
        let line = text
            .lines()
            .find(|l| l.starts_with("nfs: rdma "))
            .ok_or_else(|| format!("{what}: no `nfs: rdma` line in:\n{text}"))?;
        let get_n = |k: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX)
        };
        if get_n("rpcrdma_version") != 1 || get_n("version_fallbacks") != 1 {
            return Err(format!(
                "{what}: not Version One after one fallback: {line}"
            ));
        }
        let chunks = if what == "put" {
            "read_chunks"
        } else {
            "write_chunks"
        };
        if get_n(chunks) == 0 || get_n(chunks) == u64::MAX {
            return Err(format!("{what}: no {chunks}: {line}"));
        }
        if what == "get" && get_n("chunk_bytes_rx") < 64 << 20 {
            return Err(format!("get: less than 64 MiB of chunk data: {line}"));
        }
    }
    Ok(())
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn our_verbs_client_to_guest_knfsd_over_rxe0_and_siw0() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let nfs = build_binary("nfsclient", "nfs");
    let script = GuestScript::inline("verbs-client-knfsd", GUEST)
        .binary("nfs", &nfs)
        .env("LAB_STEP_TIMEOUT", "240");
    let mut o = lab
        .guest(script)
        .run_name("verbs-client-knfsd")
        .shared_boot("knfsd")
        .timeout(Duration::from_secs(600))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    for (run, dev) in [("rxe", "rxe0"), ("siw", "siw0")] {
        o.host_step(&format!("verbs_{run}_checked"), |o| {
            let read = |f: &str| {
                std::fs::read_to_string(o.share_file(f)).map_err(|e| format!("share/{f}: {e}"))
            };
            check_run(
                &read(&format!("nfs-{run}-put.txt"))?,
                &read(&format!("nfs-{run}-get.txt"))?,
                dev,
            )
        });
    }
    o.assert_passed();
}

#[test]
fn run_check_wants_the_device_version_one_after_a_fallback_and_the_data() {
    let provider =
        "T INFO nfsclient::mounted: NFS over RDMA addr=10.0.2.15:20049 provider=verbs on rxe0";
    let put = format!(
        "{provider}\nnfs: rdma calls=70 read_chunks=64 write_chunks=0 version_fallbacks=1 rpcrdma_version=1\n"
    );
    let get = format!(
        "{provider}\nnfs: rdma calls=70 read_chunks=0 write_chunks=64 chunk_bytes_rx=67108864 \
         version_fallbacks=1 rpcrdma_version=1\n"
    );
    assert!(check_run(&put, &get, "rxe0").is_ok());
    assert!(check_run(&put, &get, "siw0").is_err());
    assert!(check_run(&put.replace("fallbacks=1", "fallbacks=0"), &get, "rxe0").is_err());
    assert!(check_run(&put, &get.replace("=67108864", "=4096"), "rxe0").is_err());
    assert!(check_run(&put, &get.replace("version=1", "version=2"), "rxe0").is_err());
}
