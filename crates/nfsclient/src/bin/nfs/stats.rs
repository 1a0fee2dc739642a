//! `nfs stats ADDR:PORT`: a running nfsd's counters, read from its `--metrics` page
//! (Prometheus text format) and printed as `nfsstat -s` does: calls per procedure
//! of each program, the NFSv4 operations inside the COMPOUNDs, then the server's
//! other counters.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::commands::CliError;

/// One sample: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the sample lines of a text-format page (comments and blank lines
/// skipped; label values as nfsd writes them, without escapes).
fn parse(page: &str) -> Vec<Sample> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect();
            Some(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// The report: a table of procedures, one of NFSv4 operations (if any ran), then
/// every other counter that is not zero.
fn report(samples: &[Sample]) -> String {
    let label = |s: &Sample, k: &str| s.labels.get(k).cloned().unwrap_or_default();
    let key = |s: &Sample| {
        (
            label(s, "program"),
            label(s, "version"),
            label(s, "procedure"),
        )
    };
    let mut rows: BTreeMap<(String, String, String), (f64, f64, f64)> = BTreeMap::new();
    let mut operations: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut others = Vec::new();
    for s in samples {
        match s.name.as_str() {
            "nfsd_rpc_calls_total" => rows.entry(key(s)).or_default().0 = s.value,
            "nfsd_rpc_errors_total" => rows.entry(key(s)).or_default().1 = s.value,
            "nfsd_rpc_duration_seconds_sum" => rows.entry(key(s)).or_default().2 = s.value,
            n if n.starts_with("nfsd_rpc_duration_seconds") => {}
            "nfsd_nfs4_operations_total" => {
                operations.entry(label(s, "operation")).or_default().0 = s.value
            }
            "nfsd_nfs4_operation_errors_total" => {
                operations.entry(label(s, "operation")).or_default().1 = s.value
            }
            _ if s.value != 0.0 => others.push(s),
            _ => {}
        }
    }
    let mut out = format!(
        "{:<8} {:>3} {:<12} {:>12} {:>8} {:>10}\n",
        "program", "ver", "procedure", "calls", "errors", "mean ms"
    );
    for ((program, version, procedure), (calls, errors, seconds)) in &rows {
        let mean = if *calls > 0.0 {
            seconds / calls * 1e3
        } else {
            0.0
        };
        out.push_str(&format!(
            "{program:<8} {version:>3} {procedure:<12} {calls:>12} {errors:>8} {mean:>10.3}\n"
        ));
    }
    out.push('\n');
    if !operations.is_empty() {
        out.push_str(&format!(
            "{:<25} {:>12} {:>8}\n",
            "nfsv4 operation", "count", "errors"
        ));
        for (op, (count, errors)) in &operations {
            out.push_str(&format!("{op:<25} {count:>12} {errors:>8}\n"));
        }
        out.push('\n');
    }
    for s in others {
        out.push_str(&format!("{:<48} {}\n", s.name, s.value));
    }
    out
}

/// Fetches `http://addr/metrics` and prints the report.
pub(crate) async fn stats(addr: &str) -> Result<(), CliError> {
    let failed = |e: std::io::Error| {
        CliError::Usage(format!(
            "{addr}: {e} (is nfsd running with --metrics {addr}?)"
        ))
    };
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut all = String::new();
        s.read_to_string(&mut all).await?;
        Ok::<_, std::io::Error>(all)
    };
    let all = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .map_err(|_| failed(std::io::ErrorKind::TimedOut.into()))?
        .map_err(failed)?;
    let (head, body) = all
        .split_once("\r\n\r\n")
        .ok_or_else(|| CliError::Usage(format!("{addr}: not an HTTP answer")))?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(CliError::Usage(format!("{addr}: {status}")));
    }
    print!("{}", report(&parse(body)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP nfsd_rpc_calls_total x\n# TYPE nfsd_rpc_calls_total counter\n\
        nfsd_rpc_calls_total{program=\"nfs\",version=\"3\",procedure=\"GETATTR\"} 4\n\
        nfsd_rpc_errors_total{program=\"nfs\",version=\"3\",procedure=\"GETATTR\"} 1\n\
        nfsd_rpc_duration_seconds_bucket{program=\"nfs\",version=\"3\",procedure=\"GETATTR\",le=\"+Inf\"} 4\n\
        nfsd_rpc_duration_seconds_sum{program=\"nfs\",version=\"3\",procedure=\"GETATTR\"} 0.002\n\
        nfsd_nfs4_operations_total{version=\"4\",operation=\"SEQUENCE\"} 7\n\
        nfsd_nfs4_operation_errors_total{version=\"4\",operation=\"SEQUENCE\"} 2\n\
        nfsd_tcp_connections_total 3\nnfsd_rdma_sends_total 0\n";

    #[test]
    fn procedures_are_a_table_and_nonzero_counters_follow() {
        let text = report(&parse(PAGE));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("program"));
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(row, ["nfs", "3", "GETATTR", "4", "1", "0.500"]);
        assert_eq!(lines[3].split_whitespace().next(), Some("nfsv4"));
        let op: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(op, ["SEQUENCE", "7", "2"]);
        assert!(
            !text.contains("nfsd_nfs4"),
            "operations only in their table"
        );
        assert!(text.contains("nfsd_tcp_connections_total"));
        assert!(
            !text.contains("nfsd_rdma_sends_total"),
            "zeros are left out"
        );
    }
}
