//! The rdma-core provider's first proof (issue 14): our `verbs-devices` (crates/verbs,
//! built on the host, run in the guest) lists soft-RoCE `rxe0` and soft-iWARP `siw0`
//! through libibverbs, with the attributes `ibv_devinfo -v` (rdma-core's own tool)
//! reports for them, and registers memory with each through the `rdma` API on the
//! device's protection domain (`ibv_reg_mr` of an owned buffer, shared bytes and a
//! pooled buffer's range).
//!
//! rxe0 is created on eth0 beside siw0 for this scenario only (`lab_rxe_up`, which
//! loads the `crc32` crypto module rxe needs) and removed at its end (`lab_rxe_down`):
//! the other scenarios of this boot resolve 10.0.2.15 through rdma_cm and must find
//! siw0 alone on eth0.

use std::collections::BTreeMap;
use std::time::Duration;

use lab::workspace::build_binary;
use lab::{GuestScript, Lab};

const GUEST: &str = r#". /share/lib.sh
step rdma_up lab_rdma_up
lab_on_exit lab_rxe_down
step rxe_up lab_rxe_up
step rdma_links sh -c "rdma link show > $LAB_RUN_DIR/rdma-link.txt"
step ibv_devinfo sh -c "ibv_devinfo -v > $LAB_RUN_DIR/ibv_devinfo.txt"
verbs_devices() {
  /share/bin/verbs-devices >"$LAB_RUN_DIR/verbs-devices.txt"
  rc=$?
  cat "$LAB_RUN_DIR/verbs-devices.txt"
  return $rc
}
step verbs_devices verbs_devices
step rxe_down lab_rxe_down
exit 0
"#;

/// `key=value` fields of each `<kind> <device> ...` line of verbs-devices' output.
fn our_lines(text: &str, kind: &str) -> Vec<(String, BTreeMap<String, String>)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == kind).then_some(())?;
            let dev = w.next()?.to_string();
            let fields = w
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Some((dev, fields))
        })
        .collect()
}

/// `ibv_devinfo -v`: per `hca_id`, its `key: value` lines (values as printed).
fn devinfo(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut cur = None;
    for l in text.lines() {
        let Some((k, v)) = l.trim().split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "hca_id" {
            cur = Some(v.to_string());
            out.entry(v.to_string()).or_default();
        } else if let Some(dev) = &cur {
            // Only the first occurrence: port sections repeat some names.
            out.get_mut(dev)
                .expect("entry made at hca_id")
                .entry(k.to_string())
                .or_insert_with(|| v.to_string());
        }
    }
    out
}

/// A number as ibv_devinfo prints it (decimal, or 0x-prefixed hex).
fn number(v: &str) -> Option<u64> {
    let v = v.split_whitespace().next()?;
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn verbs_devices_lists_rxe0_and_siw0_with_devinfo_attributes() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let bin = build_binary("verbs", "verbs-devices");
    let script = GuestScript::inline("verbs-devices", GUEST).binary("verbs-devices", &bin);
    let mut o = lab
        .guest(script)
        .run_name("verbs-devices")
        .shared_boot("kclient")
        .timeout(Duration::from_secs(240))
        .run()
        .unwrap_or_else(|e| panic!("{e}"));
    let read = |o: &lab::Outcome, f: &str| {
        std::fs::read_to_string(o.share_file(f)).map_err(|e| format!("share/{f}: {e}"))
    };
    o.host_step("rxe0_and_siw0_listed", |o| {
        let ours = our_lines(&read(o, "verbs-devices.txt")?, "device");
        for (dev, transport) in [("rxe0", "ib"), ("siw0", "iwarp")] {
            let Some((_, f)) = ours.iter().find(|(d, _)| d == dev) else {
                return Err(format!("{dev} not listed: {ours:?}"));
            };
            let want = [
                ("transport", transport),
                ("link", "ethernet"),
                ("port", "active"),
            ];
            for (k, v) in want {
                if f.get(k).map(String::as_str) != Some(v) {
                    return Err(format!("{dev}: {k}={:?}, expected {v}", f.get(k)));
                }
            }
        }
        Ok(())
    });
    o.host_step("attributes_match_ibv_devinfo", |o| {
        let ours = our_lines(&read(o, "verbs-devices.txt")?, "device");
        let theirs = devinfo(&read(o, "ibv_devinfo.txt")?);
        // (our field, ibv_devinfo's field, cap of our type)
        let pairs = [
            ("max_mr_size", "max_mr_size", u64::MAX),
            ("max_mr", "max_mr", u32::MAX as u64),
            ("max_sge", "max_sge", u32::MAX as u64),
            ("max_qp_wr", "max_qp_wr", u32::MAX as u64),
            ("max_ird", "max_qp_rd_atom", u16::MAX as u64),
            ("max_ord", "max_qp_init_rd_atom", u16::MAX as u64),
        ];
        for dev in ["rxe0", "siw0"] {
            let f = &ours.iter().find(|(d, _)| d == dev).ok_or(dev)?.1;
            let t = theirs
                .get(dev)
                .ok_or_else(|| format!("ibv_devinfo has no {dev}"))?;
            for (ours_k, theirs_k, cap) in pairs {
                let a = f.get(ours_k).and_then(|v| number(v));
                let b = t.get(theirs_k).and_then(|v| number(v)).map(|v| v.min(cap));
                if a.is_none() || a != b {
                    return Err(format!(
                        "{dev}: our {ours_k}={a:?}, ibv_devinfo {theirs_k}={b:?}"
                    ));
                }
            }
            if f.get("max_qp_wr").and_then(|v| number(v)).unwrap_or(0) == 0 {
                return Err(format!("{dev}: max_qp_wr is 0"));
            }
        }
        Ok(())
    });
    o.host_step("memory_registered_on_both", |o| {
        let mrs = our_lines(&read(o, "verbs-devices.txt")?, "mr");
        for dev in ["rxe0", "siw0"] {
            let mine: Vec<_> = mrs
                .iter()
                .filter(|(d, _)| d == dev)
                .map(|(_, f)| f)
                .collect();
            let kind = |k: &str| {
                mine.iter()
                    .find(|f| f.get("kind").map(String::as_str) == Some(k))
            };
            let (Some(owned), Some(shared), Some(pooled)) =
                (kind("owned"), kind("shared"), kind("pooled"))
            else {
                return Err(format!("{dev}: registrations {mine:?}"));
            };
            if owned.get("len").map(String::as_str) != Some("65536")
                || shared.get("len").map(String::as_str) != Some("4096")
                || pooled.get("len").map(String::as_str) != Some("32768")
            {
                return Err(format!("{dev}: lengths {owned:?} {shared:?} {pooled:?}"));
            }
            // Live registrations in one PD cannot share a local key.
            let lkeys: std::collections::BTreeSet<_> = [owned, shared, pooled]
                .iter()
                .filter_map(|f| f.get("lkey"))
                .collect();
            if lkeys.len() != 3 {
                return Err(format!("{dev}: lkeys {owned:?} {shared:?} {pooled:?}"));
            }
        }
        Ok(())
    });
    o.assert_passed();
}

#[test]
fn devinfo_parser_reads_hca_blocks_and_numbers() {
    let text =
        "hca_id:\trxe0\n\ttransport:\t\t\tInfiniBand (0)\n\tmax_mr_size:\t\t\t0xffffffffffffffff\n\
                \tmax_qp_wr:\t\t\t1048576\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
                hca_id:\tsiw0\n\tmax_qp_wr:\t\t\t1024\n";
    let d = devinfo(text);
    assert_eq!(number(&d["rxe0"]["max_mr_size"]), Some(u64::MAX));
    assert_eq!(number(&d["rxe0"]["max_qp_wr"]), Some(1048576));
    assert_eq!(number(&d["siw0"]["max_qp_wr"]), Some(1024));
    assert_eq!(number(&d["rxe0"]["transport"]), None);
    let ours = our_lines(
        "device rxe0 transport=ib max_ird=128\nmr rxe0 kind=owned\n",
        "device",
    );
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].1["max_ird"], "128");
}
