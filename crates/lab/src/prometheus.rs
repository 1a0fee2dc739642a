//! Pages in the Prometheus text format (nfsd's `--metrics`), read by the Prometheus
//! project's own parser (Debian's python3-prometheus-client, which `lab/setup`
//! installs): an independent judge of the format, and the samples for checks.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

/// Samples by `name{label="value",...}` (labels sorted by name), or the parser's
/// complaint.
pub type Samples = BTreeMap<String, f64>;

const PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        print("%s{%s}\t%r" % (s.name, labels, s.value))
"#;

/// Parses `page` with the Prometheus parser.
pub fn parse(page: &str) -> Result<Samples, String> {
    // Debian's interpreter, for which the package is installed.
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("/usr/bin/python3: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(page.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "the Prometheus parser refused the page (python3-prometheus-client, installed \
             by lab/setup): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l
                .split_once('\t')
                .ok_or_else(|| format!("parser output {l:?}"))?;
            Ok((
                k.to_string(),
                v.parse().map_err(|_| format!("value in {l:?}"))?,
            ))
        })
        .collect()
}

/// The value of `key` in `s`, 0 if absent.
pub fn get(s: &Samples, key: &str) -> f64 {
    s.get(key).copied().unwrap_or(0.0)
}

/// `nfsd_rpc_calls_total` of NFSv3 procedure `p` as the parser keys it.
pub fn nfs3_calls(p: &str) -> String {
    format!("nfsd_rpc_calls_total{{procedure=\"{p}\",program=\"nfs\",version=\"3\"}}")
}
