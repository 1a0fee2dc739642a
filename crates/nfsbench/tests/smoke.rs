//! Keeps the bench tool working: a tiny file, one grid point per transport, one WRITE
//! and one small-RPC point, no peers. Checks that the report exists and its numbers
//! are sane (non-zero, finite). A correctness test, not a timed one.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("nfsbench-smoke-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn positive(v: &Value, field: &str) -> f64 {
    let x = v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} missing in {v}"));
    assert!(x.is_finite() && x > 0.0, "{field} = {x} in {v}");
    x
}

#[test]
fn one_point_per_transport_gives_a_sane_report() {
    let dir = scratch("run");
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_nfsbench"))
        .args(["run", "--quiet", "--no-peers", "--file-size", "4M"])
        .args([
            "--transports",
            "tcp,rdma",
            "--read-sizes",
            "64K",
            "--depths",
            "2",
        ])
        .args(["--reps", "1", "--point-secs", "5"])
        .args([
            "--write-sizes",
            "64K",
            "--write-bytes",
            "2M",
            "--write-depth",
            "2",
        ])
        .args(["--rpc-inflight", "4", "--rpc-secs", "0.1"])
        .arg("--dir")
        .arg(dir.join("scratch"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("nfsbench runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("Sequential READ"), "{stdout}");

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(report["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(report["command"]
        .as_str()
        .unwrap()
        .contains("--file-size 4M"));

    let reads = report["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 2, "one READ run per transport");
    for r in reads {
        // The whole 4 MiB file is read (the time cap is far away).
        assert_eq!(r["bytes"].as_u64(), Some(4 << 20), "{r}");
        positive(r, "mb_s");
        positive(r, "secs");
        positive(r, "client_cpu_s");
        assert!(r["server_cpu_s"].as_f64().unwrap() >= 0.0);
    }
    let transports: Vec<&str> = reads
        .iter()
        .map(|r| r["transport"].as_str().unwrap())
        .collect();
    assert!(transports.contains(&"tcp") && transports.contains(&"rdma"));

    for w in report["writes"].as_array().unwrap() {
        assert_eq!(w["bytes"].as_u64(), Some(2 << 20), "{w}");
        positive(w, "mb_s");
    }
    let rates = report["rpc_rates"].as_array().unwrap();
    assert_eq!(rates.len(), 4, "NULL and GETATTR on each transport");
    for r in rates {
        positive(r, "calls_per_s");
    }
    let ratio = &report["summary"]["read_rdma_over_tcp"][0];
    positive(ratio, "throughput");
    assert!(report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("peers skipped")));

    for chart in [
        "read-throughput-tcp.svg",
        "read-throughput-rdma.svg",
        "cpu-vs-throughput.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<circle"),
            "{chart}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `nfsbench handles` on two tiny exports: every handle taken before the restart
/// answers GETATTR after it (the tool fails otherwise), and the report is sane.
#[test]
fn handles_across_a_restart_gives_a_sane_report() {
    let dir = scratch("handles");
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_nfsbench"))
        .args([
            "handles", "--sizes", "30,2500", "--sample", "10", "--reps", "1",
        ])
        .arg("--dir")
        .arg(dir.join("scratch"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("handles.txt")).unwrap();
    assert!(text.contains("ratio 2500 / 30 files"), "{text}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("handles.json")).unwrap()).unwrap();
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, files) in results.iter().zip([30, 2500]) {
        assert_eq!(r["files"], files);
        assert_eq!(r["handles"], 10);
        for f in [
            "warm_median_us",
            "first_us",
            "median_us",
            "p99_us",
            "max_us",
        ] {
            positive(r, f);
        }
    }
    // The exports were made as asked: 2,500 files over 3 directories.
    let export = dir.join("scratch/export-2500");
    let files: usize = std::fs::read_dir(&export)
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert_eq!(files, 2500);
    let _ = std::fs::remove_dir_all(&dir);
}
